package auth

import "net"

// EventSink receives the user database's events (the core's event bus,
// exchange/event.Bus, which the node wires with SetEvents): RabbitMQ's
// user.created, user.deleted, user.authentication.failure,
// permission.created and permission.deleted. kv are key, value pairs.
type EventSink interface {
	On() bool
	EmitKV(name string, kv ...any)
}

type eventSink struct{ EventSink }

// SetEvents makes us report its events to s.
func (us *Users) SetEvents(s EventSink) { us.events.Store(&eventSink{s}) }

// eventsOn returns the sink if someone listens, else nil.
func (us *Users) eventsOn() EventSink {
	if s := us.events.Load(); s != nil && s.On() {
		return s.EventSink
	}
	return nil
}

// peerHost is remote's host, as RabbitMQ's peer_host.
func peerHost(remote net.Addr) string {
	if remote == nil {
		return ""
	}
	h, _, err := net.SplitHostPort(remote.String())
	if err != nil {
		return remote.String()
	}
	return h
}
