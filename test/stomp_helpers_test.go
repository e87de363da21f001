package test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/trident-broker/trident/conf"
)

// stBroker starts a broker with the STOMP and Web-STOMP listeners on
// loopback ports.
func stBroker(t testing.TB, mutate ...func(*conf.Config)) *broker {
	t.Helper()
	return startBroker(t, append([]func(*conf.Config){func(c *conf.Config) {
		c.STOMP.Listen, c.STOMP.WSListen = "127.0.0.1:0", "127.0.0.1:0"
	}}, mutate...)...)
}

func stAddr(b *broker) string            { return b.n.STOMPAddr().String() }
func stWSURL(b *broker) string           { return "ws://" + b.n.STOMPWSAddr().String() + "/ws" }
func stHostOpt() func(*stomp.Conn) error { return stomp.ConnOpt.Host("/") }

// stTransport is how a test reaches the broker: TCP or WebSocket.
type stTransport struct {
	name string
	dial func(t testing.TB, b *broker) net.Conn
}

var stTransports = []stTransport{
	{"tcp", func(t testing.TB, b *broker) net.Conn {
		c, err := net.Dial("tcp", stAddr(b))
		if err != nil {
			t.Fatalf("dial stomp: %v", err)
		}
		return c
	}},
	{"ws", func(t testing.TB, b *broker) net.Conn {
		return stDialWS(t, b, "v12.stomp", "v11.stomp", "v10.stomp")
	}},
}

// stDialWSRaw opens a WebSocket to Web-STOMP offering protos.
func stDialWSRaw(t testing.TB, b *broker, protos ...string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, stWSURL(b), &websocket.DialOptions{Subprotocols: protos})
	if err != nil {
		t.Fatalf("dial web-stomp: %v", err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	ws.SetReadLimit(-1)
	return ws
}

// stDialWS opens a WebSocket to Web-STOMP and returns it as a byte stream:
// frames go out as text messages (binary when not UTF-8) and text or binary
// messages come in.
func stDialWS(t testing.TB, b *broker, protos ...string) net.Conn {
	t.Helper()
	ws := stDialWSRaw(t, b, protos...)
	nc := websocket.NetConn(context.Background(), ws, websocket.MessageText)
	return &stWSConn{Conn: nc, ws: ws}
}

// stWSConn reads messages of either type as one stream.
type stWSConn struct {
	net.Conn
	ws  *websocket.Conn
	cur io.Reader
}

func (c *stWSConn) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			_, r, err := c.ws.Reader(context.Background())
			if err != nil {
				return 0, io.EOF
			}
			c.cur = r
		}
		n, err := c.cur.Read(p)
		if err == io.EOF {
			c.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *stWSConn) Write(p []byte) (int, error) {
	typ := websocket.MessageText
	if !utf8.Valid(p) {
		typ = websocket.MessageBinary
	}
	if err := c.ws.Write(context.Background(), typ, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// stSync waits until the broker has processed every frame c sent so far:
// a receipt comes back only after the frames before it.
func stSync(t testing.TB, c *stomp.Conn) {
	t.Helper()
	if err := c.Send("/topic/stomp-test-sync", "", nil, stomp.SendOpt.Receipt); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// stConnect opens a go-stomp session over tr, closed when the test ends.
func stConnect(t testing.TB, b *broker, tr stTransport, opts ...func(*stomp.Conn) error) *stomp.Conn {
	t.Helper()
	nc := tr.dial(t, b)
	c, err := stomp.Connect(nc, append([]func(*stomp.Conn) error{stHostOpt(), stomp.ConnOpt.Login("guest", "guest")}, opts...)...)
	if err != nil {
		nc.Close()
		t.Fatalf("stomp connect over %s: %v", tr.name, err)
	}
	t.Cleanup(func() { _ = c.MustDisconnect() })
	return c
}

// stDial is stConnect over TCP.
func stDial(t testing.TB, b *broker, opts ...func(*stomp.Conn) error) *stomp.Conn {
	t.Helper()
	return stConnect(t, b, stTransports[0], opts...)
}

// stRecv waits for one message on a subscription.
func stRecv(t testing.TB, sub *stomp.Subscription) *stomp.Message {
	t.Helper()
	select {
	case m, ok := <-sub.C:
		if !ok {
			t.Fatalf("subscription %s closed", sub.Destination())
		}
		if m.Err != nil {
			t.Fatalf("subscription %s: %v", sub.Destination(), m.Err)
		}
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("timeout waiting for a message on %s", sub.Destination())
	}
	return nil
}

// stNone asserts that nothing arrives on sub within d.
func stNone(t testing.TB, sub *stomp.Subscription, d time.Duration) {
	t.Helper()
	select {
	case m := <-sub.C:
		if m != nil && m.Err == nil {
			t.Fatalf("unexpected message %q on %s", m.Body, sub.Destination())
		}
	case <-time.After(d):
	}
}

// stRaw is a hand-driven STOMP connection for malformed input and exact
// frame checks.
type stRaw struct {
	t  testing.TB
	nc net.Conn
	r  *frame.Reader
}

func stDialRaw(t testing.TB, b *broker) *stRaw {
	t.Helper()
	nc, err := net.Dial("tcp", stAddr(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &stRaw{t: t, nc: nc, r: stFrameReader(nc)}
}

// stFrameReader reads go-stomp frames from nc.
func stFrameReader(nc net.Conn) *frame.Reader { return frame.NewReader(bufio.NewReader(nc)) }

func (c *stRaw) write(s string) {
	c.t.Helper()
	if _, err := c.nc.Write([]byte(s)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns the next frame (heart-beats skipped), failing after 5s.
func (c *stRaw) read() *frame.Frame {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := c.r.Read()
		if err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		if f != nil {
			return f
		}
	}
}

func (c *stRaw) connect() *frame.Frame {
	c.t.Helper()
	c.write("CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
	f := c.read()
	if f.Command != "CONNECTED" {
		c.t.Fatalf("want CONNECTED, got %s %v %q", f.Command, f.Header, f.Body)
	}
	return f
}

// expectError reads an ERROR frame whose message header contains msg and
// then the end of the connection.
func (c *stRaw) expectError(msg string) *frame.Frame {
	c.t.Helper()
	f := c.read()
	if f.Command != "ERROR" || !strings.Contains(f.Header.Get("message"), msg) {
		c.t.Fatalf("want ERROR %q, got %s %v %q", msg, f.Command, f.Header, f.Body)
	}
	c.expectClosed()
	return f
}

func (c *stRaw) expectClosed() {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := c.r.Read()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				c.t.Fatalf("connection not closed after ERROR")
			}
			return
		}
		if f != nil {
			c.t.Fatalf("unexpected frame after ERROR: %s %v", f.Command, f.Header)
		}
	}
}
