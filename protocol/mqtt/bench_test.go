package mqtt

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// benchServer is a server over the in-memory store on a loopback listener.
func benchServer(b testing.TB) string {
	b.Helper()
	_, addr := testServer(b)
	return addr
}

// testServer is benchServer that also returns the server.
func testServer(b testing.TB) (*Server, string) {
	b.Helper()
	return testServerWith(b, &memStore{m: map[string][]byte{}})
}

// testServerWith is testServer over the MetaStore meta.
func testServerWith(b testing.TB, meta MetaStore) (*Server, string) {
	b.Helper()
	return testServerSet(b, meta, nil)
}

// testServerSet is testServerWith with set, if not nil, run on the
// server before it serves.
func testServerSet(b testing.TB, meta MetaStore, set func(*Server)) (*Server, string) {
	b.Helper()
	st := store.NewMemory()
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
	s, err := NewServer(Config{}, br, users, meta, nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if set != nil {
		set(s)
	}
	go func() { _ = s.Serve(ln) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		_ = br.Close()
	})
	return s, ln.Addr().String()
}

// benchPacket appends an MQTT packet: first byte, remaining length, body.
func benchPacket(b []byte, first byte, body []byte) []byte {
	b = append(b, first)
	n := len(body)
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			break
		}
	}
	return append(b, body...)
}

func benchString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// benchReadPacket reads one whole packet from nc (handshakes only).
func benchReadPacket(b testing.TB, nc net.Conn) (byte, []byte) {
	b.Helper()
	var h [1]byte
	if _, err := nc.Read(h[:]); err != nil {
		b.Fatal(err)
	}
	n, mul := 0, 1
	for {
		var d [1]byte
		if _, err := nc.Read(d[:]); err != nil {
			b.Fatal(err)
		}
		n += int(d[0]&0x7f) * mul
		mul *= 128
		if d[0]&0x80 == 0 {
			break
		}
	}
	body := make([]byte, n)
	for got := 0; got < n; {
		k, err := nc.Read(body[got:])
		if err != nil {
			b.Fatal(err)
		}
		got += k
	}
	return h[0], body
}

// benchMQTTDial connects an MQTT client (version 4 or 5) and, with a
// filter, subscribes at QoS 0 and waits for the SUBACK.
func benchMQTTDial(b testing.TB, addr, id string, version byte, filter string) net.Conn {
	b.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	var body []byte
	body = benchString(body, "MQTT")
	body = append(body, version, 0xC2) // user name, password, clean session
	body = binary.BigEndian.AppendUint16(body, 0)
	if version == 5 {
		body = append(body, 0) // no properties
	}
	body = benchString(body, id)
	body = benchString(body, "guest")
	body = benchString(body, "guest")
	if _, err := nc.Write(benchPacket(nil, 0x10, body)); err != nil {
		b.Fatal(err)
	}
	if first, ack := benchReadPacket(b, nc); first>>4 != 2 || len(ack) < 2 || ack[1] != 0 {
		b.Fatalf("CONNACK: %x %x", first, ack)
	}
	if filter == "" {
		return nc
	}
	body = binary.BigEndian.AppendUint16(body[:0], 1)
	if version == 5 {
		body = append(body, 0)
	}
	body = benchString(body, filter)
	body = append(body, 0)
	if _, err := nc.Write(benchPacket(nil, 0x82, body)); err != nil {
		b.Fatal(err)
	}
	if first, _ := benchReadPacket(b, nc); first>>4 != 9 {
		b.Fatalf("SUBACK: %x", first)
	}
	return nc
}

// benchSubscriber counts the PUBLISH packets nc receives into got as
// {id, count} (one send per read).
// packetAt finds the whole MQTT packet at rb[off:have]: where its
// variable header starts and where it ends; ok false if it is not all
// there yet.
func packetAt(rb []byte, off, have int) (body, end int, ok bool) {
	l, mul, i := 0, 1, off+1
	for ; i < have && i < off+5; i++ {
		l += int(rb[i]&0x7f) * mul
		mul *= 128
		if rb[i]&0x80 == 0 {
			break
		}
	}
	if i >= have || i+1+l > have {
		return 0, 0, false
	}
	return i + 1, i + 1 + l, true
}

func benchSubscriber(nc net.Conn, id int, got chan<- [2]int, fail chan<- error) {
	rb := make([]byte, 256<<10)
	have := 0
	for {
		n, err := nc.Read(rb[have:])
		have += n
		off, cnt := 0, 0
		for have-off >= 2 {
			_, end, ok := packetAt(rb, off, have)
			if !ok {
				break
			}
			if rb[off]>>4 == 3 {
				cnt++
			}
			off = end
		}
		copy(rb, rb[off:have])
		have -= off
		if cnt > 0 {
			got <- [2]int{id, cnt}
		}
		if err != nil {
			fail <- err
			return
		}
	}
}

// BenchmarkQoS0Fanout is QoS 0 16-byte PUBLISHes from one raw publisher
// (batches of 256 pre-encoded packets, at most 2048 messages ahead of the
// slowest subscriber) to subs raw subscribers of the topic over loopback
// TCP. An op is one published message (subs deliveries); allocs/op are the
// whole process's (broker and clients).
func BenchmarkQoS0Fanout(b *testing.B) {
	for _, v := range []byte{4, 5} {
		for _, subs := range []int{10, 100} {
			b.Run(fmt.Sprintf("v%d/subs=%d", v, subs), func(b *testing.B) { benchFanout(b, v, subs) })
		}
	}
}

func benchFanout(b *testing.B, version byte, subs int) {
	addr := benchServer(b)
	got := make(chan [2]int, 64*subs)
	fail := make(chan error, subs)
	for i := range subs {
		nc := benchMQTTDial(b, addr, fmt.Sprintf("sub%d", i), version, "bench/t")
		go benchSubscriber(nc, i, got, fail)
	}
	pub := benchMQTTDial(b, addr, "pub", version, "")

	var body []byte
	body = benchString(body, "bench/t")
	if version == 5 {
		body = append(body, 0)
	}
	body = append(body, make([]byte, 16)...)
	one := benchPacket(nil, 0x30, body)
	const batch, window = 256, 2048
	var buf []byte
	for range batch {
		buf = append(buf, one...)
	}
	recv := make([]int, subs)
	run := func(n int) {
		for i := range recv {
			recv[i] = 0
		}
		sent := 0
		for {
			least := recv[0]
			for _, r := range recv {
				least = min(least, r)
			}
			if least >= n {
				return
			}
			for sent < n && sent-least+batch <= window {
				k := min(batch, n-sent)
				if _, err := pub.Write(buf[:k*len(one)]); err != nil {
					b.Fatal(err)
				}
				sent += k
			}
			select {
			case r := <-got:
				recv[r[0]] += r[1]
			case err := <-fail:
				b.Fatal(err)
			}
		}
	}
	run(20_000) // warm up: buffers and pools at their steady sizes
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*subs), "ns/delivery")
}
