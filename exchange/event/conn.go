package event

import (
	"net"
	"strconv"
	"time"
)

// Conn describes a client connection for connection.created and
// connection.closed, with RabbitMQ's property names. Front ends build one
// only when On() is true.
type Conn struct {
	Name             string // the connection's name in the management API
	Protocol         string // "AMQP 0-9-1", "MQTT 3.1.1", "MQTT 5", "STOMP 1.2"
	User, VHost      string
	Peer, Local      string // "host:port"
	SSL              bool
	AuthMechanism    string
	ClientProperties map[string]any // AMQP's client properties; client_id for MQTT
	UserProvidedName string
	ConnectedAt      time.Time
}

func hostPort(a string) (string, int64) {
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		return a, 0
	}
	n, _ := strconv.ParseInt(p, 10, 64)
	return h, n
}

func (c *Conn) props() []Prop {
	ph, pp := hostPort(c.Peer)
	lh, lp := hostPort(c.Local)
	cp := c.ClientProperties
	if cp == nil {
		cp = map[string]any{}
	}
	return []Prop{{"name", c.Name}, {"protocol", c.Protocol}, {"type", "network"},
		{"user", c.User}, {"vhost", c.VHost}, {"peer_host", ph}, {"peer_port", pp}, {"host", lh}, {"port", lp},
		{"ssl", c.SSL}, {"auth_mechanism", c.AuthMechanism}, {"client_properties", cp},
		{"user_provided_name", c.UserProvidedName}, {"connected_at", c.ConnectedAt.UnixMilli()}}
}

// ConnectionCreated reports an authenticated connection that has opened
// its vhost, and the authentication's success (user.authentication.success).
func (b *Bus) ConnectionCreated(c *Conn) {
	if !b.On() {
		return
	}
	ph, _ := hostPort(c.Peer)
	b.Emit(UserAuthSuccess, Prop{"name", c.User}, Prop{"auth_mechanism", c.AuthMechanism},
		Prop{"connection_name", c.Name}, Prop{"peer_host", ph}, Prop{"protocol", c.Protocol})
	b.Emit(ConnectionCreated, c.props()...)
}

// ConnectionClosed reports the end of a connection ConnectionCreated
// reported; reason is the log's "reason".
func (b *Bus) ConnectionClosed(c *Conn, reason string) {
	if !b.On() {
		return
	}
	ph, pp := hostPort(c.Peer)
	b.Emit(ConnectionClosed, Prop{"name", c.Name}, Prop{"protocol", c.Protocol}, Prop{"user", c.User},
		Prop{"vhost", c.VHost}, Prop{"peer_host", ph}, Prop{"peer_port", pp}, Prop{"user_provided_name", c.UserProvidedName},
		Prop{"reason", reason}, Prop{"client_properties", orEmpty(c.ClientProperties)})
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// Channel reports channel.created or channel.closed (AMQP) of channel
// number on connection conn.
func (b *Bus) Channel(name, conn string, number int64, user, vhost string) {
	if !b.On() {
		return
	}
	b.Emit(name, Prop{"name", conn + " (" + strconv.FormatInt(number, 10) + ")"}, Prop{"connection", conn},
		Prop{"number", number}, Prop{"user", user}, Prop{"vhost", vhost})
}
