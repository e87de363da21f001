package amqp

import (
	"net"

	"github.com/trident-broker/trident/auth"
)

// DialLocal opens an in-process AMQP connection to this server, logged in
// as u whatever credentials the client sends: the transport of a shovel's
// "amqp://" (local broker) URI, as RabbitMQ's direct connections. The
// connection is otherwise an ordinary client's (permissions, limits).
func (s *Server) DialLocal(u *auth.User) (net.Conn, error) {
	client, server := net.Pipe()
	c := newConn(s, server)
	c.preauth = u
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		client.Close()
		server.Close()
		return nil, ErrServerClosed
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	return client, nil
}
