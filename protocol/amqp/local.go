package amqp

import (
	"net"

	"github.com/trident-broker/trident/auth"
)

// DialLocal opens an in-process AMQP connection to this server, logged in
// as u whatever credentials the client sends: the transport of a shovel's
// "amqp://" (local broker) URI, as RabbitMQ's direct connections. With u
// nil the client's credentials are authenticated as a remote client's:
// the connection's peer address (net.Pipe's) is not loopback, so a
// loopback-only user is refused. The connection is otherwise an ordinary
// client's (permissions, limits).
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
