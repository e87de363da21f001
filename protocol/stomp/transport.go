package stomp

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// transport carries a connection's bytes: a TCP stream, or a WebSocket
// where each outgoing frame is one message.
type transport interface {
	io.Reader
	// writeFrames writes buf, whose frames end at the offsets in ends.
	writeFrames(buf []byte, ends []int) error
	// closeGracefully lets the peer read what was written, then closes.
	closeGracefully()
	Close() error
	remote() string
	local() string
	remoteAddr() net.Addr
	// web reports whether this is a WebSocket.
	web() bool
}

type tcpTransport struct{ nc net.Conn }

func (t *tcpTransport) Read(p []byte) (int, error)          { return t.nc.Read(p) }
func (t *tcpTransport) writeFrames(b []byte, _ []int) error { _, err := t.nc.Write(b); return err }
func (t *tcpTransport) Close() error                        { return t.nc.Close() }
func (t *tcpTransport) remote() string                      { return t.nc.RemoteAddr().String() }
func (t *tcpTransport) local() string                       { return t.nc.LocalAddr().String() }
func (t *tcpTransport) web() bool                           { return false }
func (t *tcpTransport) remoteAddr() net.Addr                { return t.nc.RemoteAddr() }

// closeGracefully half-closes the socket and drains what the peer still
// sends for a moment, so that the peer reads our ERROR frame rather than a
// reset caused by its unread data.
func (t *tcpTransport) closeGracefully() {
	if tc, ok := t.nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		_ = tc.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(tc, 1<<20))
	}
	t.nc.Close()
}

// wsTransport reads a WebSocket's messages as one byte stream: a STOMP
// frame may span messages and a message may hold several frames.
type wsTransport struct {
	ws   *websocket.Conn
	cur  io.Reader
	peer string
	host string
	tls  *tls.ConnectionState // the request's, over HTTPS; else nil
}

func newWSTransport(ws *websocket.Conn, r *http.Request) *wsTransport {
	return &wsTransport{ws: ws, peer: r.RemoteAddr, host: r.Host, tls: r.TLS}
}

func (t *wsTransport) Read(p []byte) (int, error) {
	for {
		if t.cur == nil {
			_, r, err := t.ws.Reader(context.Background())
			if err != nil {
				if websocket.CloseStatus(err) != -1 {
					return 0, io.EOF
				}
				return 0, err
			}
			t.cur = r
		}
		n, err := t.cur.Read(p)
		if err == io.EOF {
			t.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (t *wsTransport) writeFrames(b []byte, ends []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := 0
	for _, end := range ends {
		msg := b[start:end]
		start = end
		typ := websocket.MessageText
		if !utf8.Valid(msg) {
			typ = websocket.MessageBinary
		}
		if err := t.ws.Write(ctx, typ, msg); err != nil {
			return err
		}
	}
	if start < len(b) { // bytes outside any frame: heart-beats
		return t.ws.Write(ctx, websocket.MessageText, b[start:])
	}
	return nil
}

func (t *wsTransport) closeGracefully() {
	_ = t.ws.Close(websocket.StatusNormalClosure, "")
}

func (t *wsTransport) Close() error   { return t.ws.CloseNow() }
func (t *wsTransport) remote() string { return t.peer }
func (t *wsTransport) local() string  { return t.host }
func (t *wsTransport) web() bool      { return true }

func (t *wsTransport) remoteAddr() net.Addr {
	ap, err := netip.ParseAddrPort(t.peer)
	if err != nil {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}
