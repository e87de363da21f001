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
	if !s.conns.Start(c, nil) {
		client.Close()
		return nil, ErrServerClosed
	}
	return client, nil
}
