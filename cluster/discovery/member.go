package discovery

import (
	"fmt"
	"maps"
)

// Status is a member's state as this node sees it.
type Status int

// Member states.
const (
	StatusAlive   Status = iota
	StatusSuspect        // reserved: not reported with memberlist v0.7.0 (see package doc)
	StatusDead           // failed: stopped answering probes
	StatusLeft           // left the cluster on purpose
)

func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusSuspect:
		return "suspect"
	case StatusDead:
		return "dead"
	case StatusLeft:
		return "left"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Member is one node of the cluster.
type Member struct {
	Name   string
	Addr   string            // gossip host:port
	Meta   map[string]string // as gossiped by the node; do not modify
	Status Status
}

func (m Member) clone() Member {
	m.Meta = maps.Clone(m.Meta)
	return m
}

// EventKind says what happened to a member.
type EventKind int

// Event kinds.
const (
	EventJoin   EventKind = iota // joined, or came back after dead/left
	EventLeave                   // failed (Status dead) or left (Status left)
	EventUpdate                  // changed its metadata
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventUpdate:
		return "update"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is a change in membership; Member is the member as of the event.
type Event struct {
	Kind   EventKind
	Member Member
}
