package amqp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/amqp/wire"
	"github.com/trident-broker/trident/store"
)

// benchServer is a server over the in-memory store on a loopback listener.
func benchServer(b *testing.B) string {
	b.Helper()
	return benchServerOn(b, store.NewMemory())
}

// benchServerOn is benchServer over st.
func benchServerOn(b *testing.B, st exchange.Store) string {
	b.Helper()
	br, err := exchange.New(st, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := br.EnsureVHost("/"); err != nil {
		b.Fatal(err)
	}
	users, err := auth.New(st, auth.Options{DefaultUser: "guest", DefaultPass: "guest"})
	if err != nil {
		b.Fatal(err)
	}
	s := NewServer(Config{}, br, users, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		_ = br.Close()
	})
	return ln.Addr().String()
}

// benchConn is a raw client: handshake and channel 1, then bytes.
type benchConn struct {
	nc net.Conn
	r  *bufio.Reader
}

func benchDial(b *testing.B, addr string) *benchConn {
	b.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	c := &benchConn{nc: nc, r: bufio.NewReaderSize(nc, 256<<10)}
	b.Cleanup(func() { nc.Close() })
	if _, err := nc.Write([]byte(wire.ProtocolHeader)); err != nil {
		b.Fatal(err)
	}
	c.expect(b, "connection.start")
	c.send(b, 0, &wire.ConnectionStartOK{Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	c.expect(b, "connection.tune")
	c.send(b, 0, &wire.ConnectionTuneOK{ChannelMax: 1, FrameMax: 131072})
	c.send(b, 0, &wire.ConnectionOpen{VirtualHost: "/"})
	c.expect(b, "connection.open-ok")
	c.send(b, 1, &wire.ChannelOpen{})
	c.expect(b, "channel.open-ok")
	return c
}

func (c *benchConn) send(b *testing.B, ch uint16, m wire.Method) {
	buf, err := wire.AppendMethodFrame(nil, ch, m)
	if err == nil {
		_, err = c.nc.Write(buf)
	}
	if err != nil {
		b.Fatal(err)
	}
}

func (c *benchConn) expect(b *testing.B, name string) {
	for {
		f, err := wire.ReadFrame(c.r, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		if f.Type != wire.FrameMethod {
			continue
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			b.Fatal(err)
		}
		if m.Name() != name {
			b.Fatalf("got %s, want %s", m.Name(), name)
		}
		return
	}
}

// benchPublishes encodes n basic.publish of a 16-byte body to queue on
// channel 1 with the delivery mode; one is the size of each.
func benchPublishes(queue string, mode uint8, n int) (buf []byte, one int) {
	var m []byte
	m, _ = wire.AppendMethodFrame(m, 1, &wire.BasicPublish{RoutingKey: queue})
	m, _ = wire.AppendHeaderFrame(m, 1, 16, &wire.Properties{DeliveryMode: mode})
	m = wire.AppendFrame(m, wire.FrameBody, 1, make([]byte, 16))
	for range n {
		buf = append(buf, m...)
	}
	return buf, len(m)
}

// pump writes n of the pre-encoded messages in buf (one bytes each, a
// write at most len(buf)/one of them) to c while fewer than window are
// unsettled, until n are received and n settled: step waits for the next
// of those counts and adds it.
func (c *benchConn) pump(b *testing.B, buf []byte, one, n, window int, step func(recv, settled *int)) {
	batch := len(buf) / one
	sent, recv, settled := 0, 0, 0
	for recv < n || settled < n {
		for sent < n && sent-settled+batch <= window {
			k := min(batch, n-sent)
			if _, err := c.nc.Write(buf[:k*one]); err != nil {
				b.Fatal(err)
			}
			sent += k
		}
		step(&recv, &settled)
	}
}

// scan reads c until an error, parsing frames without copying them: it
// calls fn with the payload of each method frame and sends out the sum of
// what fn returned for each read that came to more than zero.
func (c *benchConn) scan(out chan<- int, fn func(payload []byte) int, errc chan<- error) {
	rb := make([]byte, 256<<10)
	have, _ := c.r.Read(rb[:c.r.Buffered()])
	for {
		n, err := c.nc.Read(rb[have:])
		have += n
		off, cnt := 0, 0
		for {
			f, used, perr := wire.ParseFrame(rb[off:have], 0)
			if perr != nil {
				if !errors.Is(perr, io.ErrUnexpectedEOF) {
					errc <- perr
					return
				}
				break
			}
			off += used
			if f.Type == wire.FrameMethod {
				cnt += fn(f.Payload)
			}
		}
		copy(rb, rb[off:have])
		have -= off
		if cnt > 0 {
			out <- cnt
		}
		if err != nil {
			errc <- err
			return
		}
	}
}

// BenchmarkTransient1to1 is transient 16-byte messages through one queue
// to a no-ack consumer over loopback TCP, a raw publisher writing batches
// of 256 pre-encoded messages (at most 64k in flight); allocs/op are the
// whole process's (broker and client) per message.
func BenchmarkTransient1to1(b *testing.B) {
	addr := benchServer(b)
	cons := benchDial(b, addr)
	cons.send(b, 1, &wire.QueueDeclare{Queue: "bench"})
	cons.expect(b, "queue.declare-ok")
	cons.send(b, 1, &wire.BasicConsume{Queue: "bench", ConsumerTag: "c", NoAck: true})
	cons.expect(b, "basic.consume-ok")
	pub := benchDial(b, addr)

	const batch = 256
	buf, one := benchPublishes("bench", 1, batch)

	got := make(chan int, 1024)
	done := make(chan error, 1)
	go cons.scan(got, func(p []byte) int {
		if binary.BigEndian.Uint16(p[2:]) == wire.MethodBasicDeliver {
			return 1
		}
		return 0
	}, done)
	const window = 64 << 10
	run := func(n int) {
		pub.pump(b, buf, one, n, window, func(recv, settled *int) {
			select {
			case c := <-got:
				*recv += c
				*settled = *recv
			case err := <-done:
				b.Fatal(err)
			}
		})
	}
	run(100_000) // warm up: buffers and pools at their steady sizes
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
}

// BenchmarkPersistentConfirm1to1 is persistent 16-byte messages through one
// durable queue on the Badger store, a raw publisher in confirm mode with
// at most 1,000 unconfirmed (batches of 256 pre-encoded messages) and a
// raw consumer with prefetch 1,000 acking with multiple=true every 100
// deliveries, over loopback TCP: the path of raw-amqp-persistent-confirm,
// where the store's writer cancels what is acked before it is written.
// ns/op and allocs/op are per message, for the whole process.
func BenchmarkPersistentConfirm1to1(b *testing.B) {
	opts := store.DefaultBadgerOptions()
	st, err := store.OpenBadger(b.TempDir(), opts, nil)
	if err != nil {
		b.Fatal(err)
	}
	addr := benchServerOn(b, st) // its cleanup closes the broker first
	b.Cleanup(func() { st.Close() })
	cons := benchDial(b, addr)
	cons.send(b, 1, &wire.QueueDeclare{Queue: "pbench", Durable: true})
	cons.expect(b, "queue.declare-ok")
	cons.send(b, 1, &wire.BasicQos{PrefetchCount: 1000})
	cons.expect(b, "basic.qos-ok")
	cons.send(b, 1, &wire.BasicConsume{Queue: "pbench", ConsumerTag: "c"})
	cons.expect(b, "basic.consume-ok")
	pub := benchDial(b, addr)
	pub.send(b, 1, &wire.ConfirmSelect{})
	pub.expect(b, "confirm.select-ok")

	const batch = 256
	buf, one := benchPublishes("pbench", 2, batch)

	errc := make(chan error, 2)
	// The consumer acks every 100th delivery, multiple=true.
	got := make(chan int, 1024)
	var ack []byte
	delivered := 0
	go cons.scan(got, func(p []byte) int {
		if binary.BigEndian.Uint16(p[2:]) != wire.MethodBasicDeliver {
			return 0
		}
		tag := binary.BigEndian.Uint64(p[5+int(p[4]):])
		if delivered++; delivered%100 == 0 {
			ack, _ = wire.AppendMethodFrame(ack[:0], 1, &wire.BasicAck{DeliveryTag: tag, Multiple: true})
			if _, err := cons.nc.Write(ack); err != nil {
				errc <- err
			}
		}
		return 1
	}, errc)
	// Confirms: the highest tag acked so far (one queue: in order).
	conf := make(chan int, 1024)
	var high uint64
	go pub.scan(conf, func(p []byte) int {
		if binary.BigEndian.Uint16(p[2:]) != wire.MethodBasicAck {
			return 0
		}
		tag := binary.BigEndian.Uint64(p[4:])
		if p[12]&1 == 0 && tag != high+1 {
			return 0 // out of order: counted when the run reaches it
		}
		n := int(tag - high)
		high = tag
		return n
	}, errc)
	const window = 1000
	run := func(n int) {
		pub.pump(b, buf, one, n, window+batch, func(recv, confirmed *int) {
			select {
			case c := <-got:
				*recv += c
			case c := <-conf:
				*confirmed += c
			case err := <-errc:
				b.Fatal(err)
			}
		})
	}
	// Warm up, with a multiple of 100 so that every delivery is acked.
	run(100_000)
	b.ReportAllocs()
	b.ResetTimer()
	run((b.N + 99) / 100 * 100)
}
