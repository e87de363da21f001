package frontend

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsEcho echoes each message until its WebSocket fails.
type wsEcho struct{ ws *websocket.Conn }

func (c *wsEcho) Serve() {
	ctx := context.Background()
	for {
		typ, b, err := c.ws.Read(ctx)
		if err != nil {
			return
		}
		if err := c.ws.Write(ctx, typ, b); err != nil {
			return
		}
	}
}

func (c *wsEcho) Abort() { c.ws.CloseNow() }

// wsServer serves echo connections over WebSocket with o; returned counts
// the handler's returns, errs receives ServeWebSocket's results.
func wsServer(t *testing.T, o WebSocket) (*httptest.Server, *Set[*wsEcho], *atomic.Int64, chan error) {
	t.Helper()
	set := NewSet[*wsEcho](errTestClosed)
	var returned atomic.Int64
	errs := make(chan error, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := ServeWebSocket(set, w, r, o, func(ws *websocket.Conn) *wsEcho { return &wsEcho{ws} })
		returned.Add(1)
		errs <- err
	}))
	t.Cleanup(srv.Close)
	return srv, set, &returned, errs
}

func dialWS(t *testing.T, srv *httptest.Server, origin string, protos ...string) (*websocket.Conn, int) {
	t.Helper()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{HTTPHeader: h, Subprotocols: protos})
	if resp == nil {
		t.Fatalf("dial with Origin %q: %v", origin, err)
	}
	if err == nil {
		t.Cleanup(func() { ws.CloseNow() })
	}
	return ws, resp.StatusCode
}

func TestServeWebSocketOrigins(t *testing.T) {
	srv, set, _, errs := wsServer(t, WebSocket{Subprotocols: []string{"one", "two"},
		AllowedOrigins: []string{"https://app.example.com", "*.trusted.test"}, ReadLimit: 1 << 10})
	own := srv.URL // http://127.0.0.1:port: the request's own host
	for _, tc := range []struct {
		origin string
		want   int
	}{
		{"", http.StatusSwitchingProtocols}, // not a browser
		{own, http.StatusSwitchingProtocols},
		{"https://app.example.com", http.StatusSwitchingProtocols},
		{"http://eu.trusted.test", http.StatusSwitchingProtocols},
		{"http://evil.example", http.StatusForbidden},
		{"http://app.example.com", http.StatusForbidden}, // listed with https only
		{"null", http.StatusForbidden},
	} {
		ws, got := dialWS(t, srv, tc.origin, "two")
		if got != tc.want {
			t.Errorf("Origin %q: status %d, want %d", tc.origin, got, tc.want)
			continue
		}
		if got == http.StatusForbidden {
			if err := <-errs; err == nil {
				t.Errorf("Origin %q: refused, but ServeWebSocket returned no error", tc.origin)
			}
			continue
		}
		if p := ws.Subprotocol(); p != "two" {
			t.Errorf("Origin %q: subprotocol %q, want two", tc.origin, p)
		}
		ws.Close(websocket.StatusNormalClosure, "")
		if err := <-errs; err != nil {
			t.Errorf("Origin %q: ServeWebSocket: %v", tc.origin, err)
		}
	}
	if n := len(set.Snapshot()); n != 0 {
		t.Fatalf("%d connections still open", n)
	}
}

// TestServeWebSocketServesUntilEnd: the connection wrap made is served in
// the set (it echoes), the handler does not return while it is open, a
// message over ReadLimit ends it (close 1009) and then the
// handler returns.
func TestServeWebSocketServesUntilEnd(t *testing.T) {
	srv, set, returned, errs := wsServer(t, WebSocket{ReadLimit: 100})
	ws, code := dialWS(t, srv, "")
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "hello" {
		t.Fatalf("echo: %q, %v", b, err)
	}
	if n := len(set.Snapshot()); n != 1 {
		t.Fatalf("%d connections in the set, want 1", n)
	}
	if returned.Load() != 0 {
		t.Fatal("the handler returned while its connection was open")
	}
	if err := ws.Write(ctx, websocket.MessageBinary, make([]byte, 101)); err != nil {
		t.Fatal(err)
	}
	_, _, err := ws.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("after a message over the read limit: %v, want close 1009", err)
	}
	select {
	case err := <-errs:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the handler did not return after its connection ended")
	}
	if n := len(set.Snapshot()); n != 0 {
		t.Fatalf("%d connections still in the set", n)
	}
}

// TestServeWebSocketDuringShutdown: an upgrade after Shutdown is aborted
// by the set, and the handler returns.
func TestServeWebSocketDuringShutdown(t *testing.T) {
	srv, set, _, errs := wsServer(t, WebSocket{ReadLimit: 100})
	if err := set.Shutdown(context.Background(), func(*wsEcho) {}); err != nil {
		t.Fatal(err)
	}
	ws, code := dialWS(t, srv, "")
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := ws.Read(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read on a connection refused during shutdown: %v", err)
	}
	select {
	case <-errs:
	case <-ctx.Done():
		t.Fatal("the handler did not return")
	}
}
