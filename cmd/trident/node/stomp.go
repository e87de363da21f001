package node

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/trident-broker/trident/protocol/stomp"
	"github.com/trident-broker/trident/web"
)

// stompFrontEnd runs the STOMP listener (cfg.STOMP.Listen) and STOMP over
// WebSocket at /ws (cfg.STOMP.WSListen).
type stompFrontEnd struct {
	srv    *stomp.Server
	ln     net.Listener
	wsLn   net.Listener
	http   *http.Server
	served chan error
}

func (n *Node) startSTOMP() error {
	c := n.cfg.STOMP
	if c.Listen == "" && c.WSListen == "" && !tlsWanted(n.cfg, c.TLSListen) && !tlsWanted(n.cfg, c.WSSListen) {
		return nil
	}
	f := &stompFrontEnd{served: make(chan error, 1)}
	f.srv = stomp.NewServer(stomp.Config{
		MaxBodySize:     n.cfg.AMQP.MaxMessageSize,
		MaxHeaders:      n.cfg.STOMP.MaxHeaders,
		MaxHeaderLength: n.cfg.STOMP.MaxHeaderLength,
		// One handshake timeout for every protocol.
		HandshakeTimeout:            n.cfg.AMQP.HandshakeTimeout,
		MaxFrameSizeUnauthenticated: c.MaxFrameSizeUnauthenticated,
		// Anonymous logins map to the STOMP listeners' own user, never
		// to the bootstrap admin (default_user).
		AllowAnonymous:  c.AllowAnonymous,
		DefaultUser:     c.DefaultUser,
		DefaultPass:     c.DefaultPass,
		AllowedOrigins:  n.cfg.HTTP.AllowedOrigins,
		DefaultVHost:    n.cfg.DefaultVHost,
		CertLogin:       n.stompCertLogin(),
		ConsumerTimeout: n.cfg.ConsumerTimeout,
		Tracer:          n.tracer,
	}, n.broker, n.users, n.log.With("component", "stomp"))
	if c.Listen != "" {
		ln, err := n.clientListen(c.Listen)
		if err != nil {
			return fmt.Errorf("node: stomp.listen: %w", err)
		}
		f.ln = ln
		n.serveIn("stomp", ln, f.srv.Serve, func(err error) { f.served <- err })
		n.serve("stomp", ln.Addr())
		n.log.Info("listening", "protocol", "stomp", "addr", ln.Addr().String())
	} else {
		f.served <- nil
	}
	if c.WSListen != "" {
		ln, err := n.clientListen(c.WSListen)
		if err != nil {
			if f.ln != nil {
				f.ln.Close()
			}
			return fmt.Errorf("node: stomp.ws_listen: %w", err)
		}
		f.wsLn = ln
		mux := http.NewServeMux()
		mux.Handle("/ws", f.srv)
		f.http = &http.Server{Handler: mux, ReadHeaderTimeout: n.cfg.AMQP.HandshakeTimeout}
		n.serveIn("web-stomp", ln, f.http.Serve, nil)
		n.serve("http/web-stomp", ln.Addr())
		n.log.Info("listening", "protocol", "web-stomp", "addr", ln.Addr().String())
	}
	n.frontEnds = append(n.frontEnds, f)
	return nil
}

func (f *stompFrontEnd) Name() string { return "stomp" }

func (f *stompFrontEnd) Shutdown(ctx context.Context) error {
	if f.http != nil {
		// Stop accepting upgrades; the WebSocket connections are the
		// server's and are closed by its Shutdown below.
		f.wsLn.Close()
	}
	err := f.srv.Shutdown(ctx)
	if f.http != nil {
		_ = f.http.Close()
	}
	if f.ln != nil {
		f.ln.Close()
		select {
		case <-f.served:
		case <-ctx.Done():
		}
	}
	return err
}

func (f *stompFrontEnd) ListConnections() []web.ConnectionInfo {
	var out []web.ConnectionInfo
	for _, i := range f.srv.Connections() {
		out = append(out, web.ConnectionInfo{Name: i.Name, Protocol: i.Protocol, User: i.User, VHost: i.VHost,
			Peer: i.Peer, Local: i.Local, ConnectedAt: i.ConnectedAt, ClientProperties: i.Client, Heartbeat: i.Heartbeat,
			RecvOct: i.RecvOct, SendOct: i.SendOct, Published: i.Published, Delivered: i.Delivered})
	}
	return out
}

func (f *stompFrontEnd) CloseConnection(name, reason string) bool {
	return f.srv.CloseConnection(name, reason)
}

func (n *Node) stompFrontEnd() *stompFrontEnd {
	for _, f := range n.frontEnds {
		if s, ok := f.(*stompFrontEnd); ok {
			return s
		}
	}
	return nil
}

// STOMPAddr returns the STOMP listener's address, or nil when disabled.
func (n *Node) STOMPAddr() net.Addr {
	if f := n.stompFrontEnd(); f != nil && f.ln != nil {
		return f.ln.Addr()
	}
	return nil
}

// STOMPWSAddr returns the Web-STOMP listener's address (STOMP over
// WebSocket at ws://ADDR/ws), or nil when disabled.
func (n *Node) STOMPWSAddr() net.Addr {
	if f := n.stompFrontEnd(); f != nil && f.wsLn != nil {
		return f.wsLn.Addr()
	}
	return nil
}
