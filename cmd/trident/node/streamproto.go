package node

import (
	"context"
	"fmt"
	"net"

	"github.com/trident-broker/trident/protocol/stream"
	"github.com/trident-broker/trident/web"
)

// streamFrontEnd runs RabbitMQ's stream protocol listener (cfg.Stream.Listen;
// its TLS twin, stream.tls_listen, is tls.go's).
type streamFrontEnd struct {
	srv    *stream.Server
	ln     net.Listener
	served chan error
}

func (n *Node) startStream() error {
	c := n.cfg.Stream
	if c.Listen == "" && !tlsWanted(n.cfg, c.TLSListen) {
		return nil
	}
	f := &streamFrontEnd{served: make(chan error, 1)}
	f.srv = stream.NewServer(stream.Config{
		FrameMax:          uint32(c.FrameMax),
		InitialFrameMax:   uint32(c.InitialFrameMax),
		Heartbeat:         c.Heartbeat,
		HandshakeTimeout:  n.cfg.AMQP.HandshakeTimeout, // one handshake timeout for every protocol
		AdvertisedHost:    c.AdvertisedHost,
		AdvertisedPort:    c.AdvertisedPort,
		AdvertisedTLSPort: c.AdvertisedTLSPort,
		CertLogin:         n.amqpCertLogin(), // EXTERNAL whenever TLS is on, as AMQP
	}, n.broker, n.users, n.log.With("component", "stream"))
	if c.Listen != "" {
		ln, err := n.clientListen(c.Listen) // a drain suspends it, as every client listener
		if err != nil {
			return fmt.Errorf("node: stream.listen: %w", err)
		}
		f.ln = ln
		n.serveIn("stream", ln, f.srv.Serve, func(err error) { f.served <- err })
		n.serve("stream", ln.Addr())
		n.log.Info("listening", "protocol", "stream", "addr", ln.Addr().String())
	} else {
		f.served <- nil
	}
	n.frontEnds = append(n.frontEnds, f)
	return nil
}

func (f *streamFrontEnd) Name() string { return "stream" }

func (f *streamFrontEnd) Shutdown(ctx context.Context) error {
	err := f.srv.Shutdown(ctx)
	if f.ln != nil {
		f.ln.Close()
		select {
		case <-f.served:
		case <-ctx.Done():
		}
	}
	return err
}

func (f *streamFrontEnd) ListConnections() []web.ConnectionInfo {
	var out []web.ConnectionInfo
	for _, i := range f.srv.Connections() {
		out = append(out, web.ConnectionInfo{Name: i.Name, Protocol: "stream", User: i.User, VHost: i.VHost,
			Peer: i.Peer, Local: i.Local, ConnectedAt: i.ConnectedAt, ClientProperties: i.Client,
			Heartbeat: i.Heartbeat, RecvOct: i.RecvOct, SendOct: i.SendOct, Published: i.Published, Delivered: i.Delivered})
	}
	return out
}

func (f *streamFrontEnd) CloseConnection(name, reason string) bool {
	return f.srv.CloseConnection(name, reason)
}

// StreamAddr returns the stream protocol listener's address, or nil.
func (n *Node) StreamAddr() net.Addr {
	for _, f := range n.frontEnds {
		if s, ok := f.(*streamFrontEnd); ok && s.ln != nil {
			return s.ln.Addr()
		}
	}
	return nil
}

// StreamTLSAddr returns the stream protocol's TLS listener's address, or nil.
func (n *Node) StreamTLSAddr() net.Addr { return n.tlsAddr("stream.tls_listen") }
