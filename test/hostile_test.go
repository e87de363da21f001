package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// The hostile-client suite: garbage, oversized and slow input on every
// port of one node while well-behaved clients keep using it. The node must
// stay up, answer the others, keep its memory bounded and close the
// hostile connections by itself.

// hostileHandshakeTimeout is the node's handshake timeout in this suite.
const hostileHandshakeTimeout = time.Second

// hostileMemoryBound is what the whole test process (node and clients)
// may hold from the OS at any time during the suite.
const hostileMemoryBound = 512 << 20

type hostileNode struct {
	*broker
	ports map[string]string // name → host:port, TCP level
	api   apiClient
}

func startHostileNode(t *testing.T) *hostileNode {
	b := startBroker(t, allProtocols, func(c *conf.Config) {
		c.AMQP.HandshakeTimeout = hostileHandshakeTimeout
		c.MemoryHighWatermarkPercent = 0 // the suite measures memory itself
	})
	n := b.n
	return &hostileNode{broker: b, api: apiClient{t: t, base: "http://" + n.HTTPAddr().String(), user: "guest", pass: "guest"},
		ports: map[string]string{
			"amqp": n.AMQPAddr().String(), "mqtt": n.MQTTAddr().String(), "stomp": n.STOMPAddr().String(),
			"web-stomp": n.STOMPWSAddr().String(), "web-mqtt": n.MQTTWSAddr().String(), "http": n.HTTPAddr().String(),
		}}
}

// memoryPeak samples the process's memory (heap, stacks and runtime, not
// released to the OS) every 10ms until stop is called, which returns the
// peak.
func memoryPeak() (stop func() uint64) {
	// Earlier tests in this process (the Jepsen-style cluster runs keep
	// histories of hundreds of thousands of operations) leave free heap the
	// runtime has not yet returned to the OS: return it, so that the peak
	// is this test's.
	debug.FreeOSMemory()
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64() - s[1].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak.Load() }
}

// canary publishes and fetches a message over one AMQP connection every
// 50ms in the background and counts failures.
type canary struct {
	fails, rounds atomic.Int64
	stop          chan struct{}
	done          chan struct{}
}

func startCanary(t *testing.T, url string) *canary {
	_, ch := channel(t, url)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &canary{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for i := 0; ; i++ {
			select {
			case <-c.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			body := fmt.Sprint("canary-", i)
			err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{Body: []byte(body)})
			ok := false
			for try := 0; err == nil && try < 100 && !ok; try++ {
				var d amqp.Delivery
				d, ok, err = ch.Get(q.Name, true)
				if ok && string(d.Body) != body {
					err = fmt.Errorf("got %q, want %q", d.Body, body)
				}
				if !ok {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if err != nil || !ok {
				c.fails.Add(1)
			}
			c.rounds.Add(1)
		}
	}()
	return c
}

func (c *canary) finish(t *testing.T) {
	close(c.stop)
	<-c.done
	if f := c.fails.Load(); f > 0 {
		t.Errorf("canary: %d of %d round trips failed", f, c.rounds.Load())
	}
	t.Logf("canary: %d round trips, all fine", c.rounds.Load())
}

// checkClients proves the node serves well-behaved clients of every
// protocol: AMQP, MQTT, STOMP, Web-STOMP and the HTTP API.
func (h *hostileNode) checkClients(t *testing.T) {
	t.Helper()
	_, ch := channel(t, h.URL)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	mc := dial3(t, "tcp://"+h.ports["mqtt"], fmt.Sprint("hostile-check-", rand.Int()), true)
	mc.publish(t, "hostile/check", 1, false, "x")
	mc.Disconnect(10)
	mw := dial3(t, "ws://"+h.ports["web-mqtt"]+"/ws", fmt.Sprint("hostile-check-ws-", rand.Int()), true)
	mw.publish(t, "hostile/check", 1, false, "x")
	mw.Disconnect(10)
	for _, tr := range stTransports {
		sc := stConnect(t, h.broker, tr)
		if err := sc.Send("/topic/hostile.check", "text/plain", []byte("x"), stomp.SendOpt.Receipt); err != nil {
			t.Fatalf("stomp over %s: %v", tr.name, err)
		}
	}
	h.api.expect(http.StatusOK, "GET", "/api/overview", nil)
	h.api.expect(http.StatusOK, "GET", "/api/health/checks/alarms", nil)
}

// expectClosed reads from nc until the node closes it, failing after d.
func expectClosed(t *testing.T, what string, nc net.Conn, d time.Duration) {
	t.Helper()
	if waitClosed(nc, time.Now().Add(d)) {
		t.Errorf("%s: connection still open after %s", what, d)
	}
}

// waitClosed reads and drops what nc receives until the peer closes it
// (false) or the deadline passes (true). Its buffer is small: the
// half-open test runs thousands of these.
func waitClosed(nc net.Conn, deadline time.Time) (timedOut bool) {
	_ = nc.SetReadDeadline(deadline)
	var buf [512]byte
	for {
		_, err := nc.Read(buf[:])
		if err != nil {
			ne, ok := err.(net.Error)
			return ok && ne.Timeout()
		}
	}
}

func dialT(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// dialWS opens a WebSocket to one of the node's /ws endpoints and returns
// it as a net.Conn carrying binary messages.
func dialWS(t *testing.T, addr string, protos ...string) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", &websocket.DialOptions{Subprotocols: protos})
	if err != nil {
		t.Fatalf("dial ws %s: %v", addr, err)
	}
	nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
	t.Cleanup(func() { nc.Close() })
	return nc
}

var wsProtos = map[string][]string{"web-stomp": {"v12.stomp"}, "web-mqtt": {"mqtt"}}

func TestHostileClients(t *testing.T) {
	h := startHostileNode(t)
	stopMem := memoryPeak()
	can := startCanary(t, h.URL)
	start := time.Now()

	t.Run("random bytes on every port", func(t *testing.T) {
		var wg sync.WaitGroup
		for name, addr := range h.ports {
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(i), uint64(len(name))))
					buf := make([]byte, 1+rng.IntN(64<<10))
					for j := range buf {
						buf[j] = byte(rng.Uint32())
					}
					nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
					if err != nil {
						t.Errorf("dial %s: %v", name, err)
						return
					}
					defer nc.Close()
					_ = nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
					_, _ = nc.Write(buf)
					expectClosed(t, name+" after random bytes", nc, hostileHandshakeTimeout+4*time.Second)
				}()
			}
		}
		// Random bytes inside well-formed WebSocket messages.
		for name, addr := range h.ports {
			protos, ok := wsProtos[name]
			if !ok {
				continue
			}
			for i := range 10 {
				nc := dialWS(t, addr, protos...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 1+rand.IntN(8<<10))
					for j := range buf {
						buf[j] = byte(rand.Uint32())
					}
					if i%2 == 0 { // a valid protocol start, then garbage
						if name == "web-stomp" {
							buf = append([]byte("CONNECT\naccept-version:1.2\nlogin:guest\npasscode:guest\n\n\x00"), buf...)
						}
					}
					_, _ = nc.Write(buf)
					expectClosed(t, name+" after random messages", nc, hostileHandshakeTimeout+4*time.Second)
				}()
			}
		}
		wg.Wait()
		h.checkClients(t)
	})

	t.Run("malformed and oversized frames", func(t *testing.T) {
		cases := []struct {
			name, port string
			data       []byte
		}{
			{"amqp bad protocol header", "amqp", []byte("AMQP\x01\x01\x00\x09")},
			{"amqp 4 GiB frame", "amqp", append([]byte("AMQP\x00\x00\x09\x01"), 1, 0, 0, 0xff, 0xff, 0xff, 0xff)},
			{"amqp frame over frame_max", "amqp", append(append([]byte("AMQP\x00\x00\x09\x01"), 1, 0, 0, 0, 0x10, 0, 0), make([]byte, 1<<20)...)},
			{"amqp unknown frame type", "amqp", append([]byte("AMQP\x00\x00\x09\x01"), 9, 0, 0, 0, 0, 0, 0, 0xce)},
			{"mqtt CONNECT of 256 MiB", "mqtt", []byte{0x10, 0xff, 0xff, 0xff, 0x7f}},
			{"mqtt bad remaining length", "mqtt", []byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff}},
			{"mqtt PUBLISH first", "mqtt", []byte{0x30, 0x03, 0, 1, 'a'}},
			{"mqtt CONNECT with bad protocol name", "mqtt", []byte{0x10, 0x0c, 0, 4, 'X', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 0}},
			{"stomp unknown command", "stomp", []byte("FROB\n\n\x00")},
			{"stomp header line of 1 MiB", "stomp", append([]byte("CONNECT\nx:"), bytes.Repeat([]byte("a"), 1<<20)...)},
			{"stomp content-length 1 TB", "stomp", []byte("CONNECT\naccept-version:1.2\ncontent-length:1000000000000\n\n")},
			{"http request line of 2 MiB", "http", append([]byte("GET /"), bytes.Repeat([]byte("a"), 2<<20)...)},
		}
		var wg sync.WaitGroup
		for _, c := range cases {
			nc := dialT(t, h.ports[c.port])
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
				_, _ = nc.Write(c.data)
			}()
			t0 := time.Now()
			expectClosed(t, c.name, nc, hostileHandshakeTimeout+4*time.Second)
			t.Logf("%s: closed after %s", c.name, time.Since(t0).Round(10*time.Millisecond))
		}
		wg.Wait()
		h.checkClients(t)
	})

	t.Run("a million STOMP headers", func(t *testing.T) {
		for _, tr := range []string{"stomp", "web-stomp"} {
			var nc net.Conn
			if tr == "stomp" {
				nc = dialT(t, h.ports[tr])
			} else {
				nc = dialWS(t, h.ports[tr], wsProtos[tr]...)
			}
			if _, err := nc.Write([]byte("CONNECT\naccept-version:1.2\nlogin:guest\npasscode:guest\n\n\x00")); err != nil {
				t.Fatal(err)
			}
			go func() {
				var b bytes.Buffer
				b.WriteString("SEND\ndestination:/queue/hostile\n")
				for i := range 1_000_000 {
					fmt.Fprintf(&b, "h%d:v\n", i)
					if b.Len() > 64<<10 {
						if _, err := nc.Write(b.Bytes()); err != nil {
							return
						}
						b.Reset()
					}
				}
				b.WriteString("\n\x00")
				_, _ = nc.Write(b.Bytes())
			}()
			expectClosed(t, tr+" million headers", nc, 10*time.Second)
		}
		h.checkClients(t)
	})

	t.Run("huge AMQP field tables", func(t *testing.T) {
		_, ch := channel(t, h.URL)
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		wide := amqp.Table{}
		for i := range 8000 {
			wide[fmt.Sprint("k", i)] = int32(i)
		}
		deep := amqp.Table{}
		for range 9000 {
			deep = amqp.Table{"n": deep}
		}
		for _, hdr := range []amqp.Table{wide, deep} {
			// Either accepted or refused with a protocol error; never a crash.
			_ = ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{Headers: hdr, Body: []byte("x")})
		}
		// A header frame past frame_max, hand-made: the connection is closed.
		nc := dialT(t, h.ports["amqp"])
		hdr := make([]byte, 7)
		hdr[0] = 2
		binary.BigEndian.PutUint32(hdr[3:], 200<<10)
		_, _ = nc.Write(append([]byte("AMQP\x00\x00\x09\x01"), hdr...))
		expectClosed(t, "amqp oversized header frame", nc, hostileHandshakeTimeout+4*time.Second)
		h.checkClients(t)
	})

	t.Run("slow writers are closed by the handshake timeout", func(t *testing.T) {
		starts := map[string][]byte{
			"amqp":  []byte("AMQP\x00\x00\x09\x01"),
			"mqtt":  {0x10, 0x0c, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 0},
			"stomp": []byte("CONNECT\naccept-version:1.2\nlogin:guest\npasscode:guest\n\n\x00"),
			"http":  []byte("GET /api/overview HTTP/1.1\r\nHost: x\r\n\r\n"),
			// The WebSocket upgrade request itself, sent slowly.
			"web-stomp": []byte("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n"),
			"web-mqtt":  []byte("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n"),
		}
		var wg sync.WaitGroup
		for name, data := range starts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc := dialT(t, h.ports[name])
				t0 := time.Now()
				go func() {
					for _, c := range data {
						if _, err := nc.Write([]byte{c}); err != nil {
							return
						}
						time.Sleep(200 * time.Millisecond)
					}
				}()
				expectClosed(t, name+" slow writer", nc, hostileHandshakeTimeout+3*time.Second)
				t.Logf("%s slow writer closed after %s", name, time.Since(t0).Round(10*time.Millisecond))
			}()
		}
		// Slow CONNECTs inside a WebSocket that was opened quickly.
		for name, data := range map[string][]byte{"web-stomp": starts["stomp"], "web-mqtt": starts["mqtt"]} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc := dialWS(t, h.ports[name], wsProtos[name]...)
				go func() {
					for _, c := range data {
						if _, err := nc.Write([]byte{c}); err != nil {
							return
						}
						time.Sleep(200 * time.Millisecond)
					}
				}()
				expectClosed(t, name+" slow CONNECT in a WebSocket", nc, hostileHandshakeTimeout+3*time.Second)
			}()
		}
		wg.Wait()
		h.checkClients(t)
	})

	t.Run("5000 half-open connections", func(t *testing.T) {
		const total = 5000
		raiseFileLimit(t, 4*total)
		ports := []string{"amqp", "mqtt", "stomp", "web-stomp", "web-mqtt", "http"}
		partial := map[string][]byte{
			"amqp": []byte("AMQP"), "mqtt": {0x10, 0x0c, 0, 4}, "stomp": []byte("CONN"),
			"web-stomp": []byte("GET /ws HTTP/1.1\r\n"), "web-mqtt": []byte("GET /ws HTTP/1.1\r\n"), "http": []byte("GET / HTTP/1.1\r\n"),
		}
		conns := make([]net.Conn, 0, total)
		defer func() {
			for _, nc := range conns {
				nc.Close()
			}
		}()
		t0 := time.Now()
		for i := range total {
			p := ports[i%len(ports)]
			nc, err := net.DialTimeout("tcp", h.ports[p], 5*time.Second)
			if err != nil {
				t.Fatalf("connection %d to %s: %v", i, p, err)
			}
			_, _ = nc.Write(partial[p])
			conns = append(conns, nc)
		}
		t.Logf("%d half-open connections opened in %s; goroutines %d", total, time.Since(t0).Round(time.Millisecond), runtime.NumGoroutine())
		// Well-behaved clients are served meanwhile.
		h.checkClients(t)
		// The node closes every one of them by itself.
		deadline := time.Now().Add(hostileHandshakeTimeout + 10*time.Second)
		var open atomic.Int64
		var wg sync.WaitGroup
		for _, nc := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if waitClosed(nc, deadline) {
					open.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := open.Load(); n > 0 {
			t.Errorf("%d of %d half-open connections still open after %s", n, total, time.Since(t0).Round(time.Millisecond))
		}
		t.Logf("all closed by the node %s after opening", time.Since(t0).Round(time.Millisecond))
		h.checkClients(t)
	})

	can.finish(t)
	peak := stopMem()
	t.Logf("peak memory of the test process (node and clients): %.1f MiB over %s", float64(peak)/(1<<20), time.Since(start).Round(time.Millisecond))
	if peak > hostileMemoryBound {
		t.Errorf("peak memory %d bytes is over the bound %d", peak, hostileMemoryBound)
	}
	if h.n == nil {
		t.Fatal("node stopped")
	}
}

// raiseFileLimit raises RLIMIT_NOFILE to at least n (both ends of every
// loopback connection live in this process), or skips.
func raiseFileLimit(t *testing.T, n uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if rl.Cur >= n {
		return
	}
	want := rl
	want.Cur = max(n, rl.Cur)
	if want.Max < want.Cur {
		want.Max = want.Cur // root may raise the hard limit
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		want.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil || want.Cur < n {
			t.Skipf("RLIMIT_NOFILE is %d and cannot be raised to %d: %v", rl.Cur, n, err)
		}
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl) })
}
