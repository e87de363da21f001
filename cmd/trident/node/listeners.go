package node

import (
	"net"
	"sync"

	"github.com/trident-broker/trident/web"
)

// servedListeners is the registry of the listeners the node serves, for
// the management API (/api/overview, /api/nodes and the protocol-listener,
// port-listener and certificate-expiration health checks). Each front end
// adds its listeners where it opens them, under RabbitMQ's protocol names
// ("amqp", "amqp/ssl", "mqtt", "http/web-mqtt", "clustering", ...); Close
// empties it first, so that a node going down stops answering ready.
type servedListeners struct {
	mu  sync.Mutex
	all []web.Listener
}

func (s *servedListeners) add(l web.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, l)
}

// list returns a copy, in the order the listeners were opened.
func (s *servedListeners) list() []web.Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]web.Listener(nil), s.all...)
}

func (s *servedListeners) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = nil
}

// serveIn runs serve(ln) in a goroutine of its own, logs an end that is
// not a close (logServeErr) under name, then calls after, if not nil, with
// serve's result. Every listener of the node is served through it.
func (n *Node) serveIn(name string, ln net.Listener, serve func(net.Listener) error, after func(error)) {
	go func() {
		err := serve(ln)
		logServeErr(n.log, name, err)
		if after != nil {
			after(err)
		}
	}()
}

// serve records a plain listener.
func (n *Node) serve(protocol string, addr net.Addr) {
	n.served.add(web.Listener{Protocol: protocol, Addr: addr})
}

// serveTLS records a listener of the client TLS settings (conf.TLS).
func (n *Node) serveTLS(protocol string, addr net.Addr) {
	c := n.cfg.TLS
	n.served.add(web.Listener{Protocol: protocol, Addr: addr, CertFile: c.CertFile, CAFile: c.CAFile,
		SocketOpts: map[string]any{"verify": c.Verify, "fail_if_no_peer_cert": c.FailIfNoPeerCert}})
}

// listeners is web.Options.Listeners.
func (n *Node) listeners() []web.Listener { return n.served.list() }
