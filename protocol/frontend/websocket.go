package frontend

import (
	"net/http"

	"github.com/coder/websocket"
)

// WebSocket is how a front end accepts connections over WebSocket.
type WebSocket struct {
	// Subprotocols are the subprotocols offered, preferred first.
	Subprotocols []string
	// AllowedOrigins are the origin patterns (http.allowed_origins:
	// websocket.AcceptOptions.OriginPatterns; "*" any) a browser's upgrade
	// may come from besides the request's own host. A request from another
	// origin gets 403, so that a page on another site cannot use the
	// visitor's network position (loopback, an intranet) to reach the
	// broker; a request without an Origin header (not a browser) is
	// accepted.
	AllowedOrigins []string
	// ReadLimit bounds a message the connection reads.
	ReadLimit int64
}

// ServeWebSocket upgrades r as o says and serves the connection wrap
// makes of it in set (which aborts it during shutdown), returning when it
// has ended: the http.Server keeps the hijacked connection while the
// handler runs, so the handler must not return before. A refused upgrade
// has been answered (403 for a foreign origin, 400 for a request that is
// not an upgrade) and its error is returned.
func ServeWebSocket[C Conn](set *Set[C], w http.ResponseWriter, r *http.Request, o WebSocket, wrap func(*websocket.Conn) C) error {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:   o.Subprotocols,
		OriginPatterns: o.AllowedOrigins,
	})
	if err != nil {
		return err
	}
	ws.SetReadLimit(o.ReadLimit)
	done := make(chan struct{})
	set.Start(wrap(ws), done)
	<-done
	return nil
}
