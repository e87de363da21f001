package shovel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Parameters (shovels, MQTT bridges) change by typed commands (issue 43,
// item 1), as the core's topology and the users do. Standalone, Put and
// Delete write the definition's record, then start or stop its shovel. In
// a cluster that runs commands (Proposer.ParameterCommands: the metadata
// group's topology_commands flag is enabled), PutComponent and
// DeleteComponent propose a Command instead; the metadata group's FSM
// calls ApplyCommitted on every node, this one included, which updates
// the definitions (starting or stopping shovels on goroutines of their
// own) and returns the record for the FSM to write to the node's store.
// Until the flag is enabled (a node of v0.1.0 is a member) the records
// are written through the Store, which replicates them, and ApplyMeta
// follows: the reader of that older format.

// Op is what a Command does. The numbers are part of the encoding.
type Op uint8

// Command operations.
const (
	OpPut    Op = 1 // Component, VHost, Name, User, Value
	OpDelete Op = 2 // Component, VHost, Name
)

// Command is one change of a parameter. Actor is the user it acts for
// ("" for the broker itself: a shovel that completed its
// src-delete-after); User is the user the shovel runs as.
type Command struct {
	Op        Op             `json:"op"`
	Actor     string         `json:"actor,omitempty"`
	Component string         `json:"component,omitempty"`
	VHost     string         `json:"vhost"`
	Name      string         `json:"name"`
	User      string         `json:"user,omitempty"`
	Value     map[string]any `json:"value,omitempty"`
}

const commandVersion = 1

// ErrBadCommand is an encoded Command that does not decode.
var ErrBadCommand = errors.New("shovel: bad parameter command")

// unreadableError is a Command of a version, an operation or a field
// this release does not know: its Unreadable method lets the metadata
// group's FSM halt on it rather than skip it.
type unreadableError struct{ what string }

func (e *unreadableError) Error() string {
	return "shovel: parameter command of a newer format: " + e.what
}

// Unreadable reports that a newer release wrote the command.
func (*unreadableError) Unreadable() bool { return true }

// IsUnreadable reports whether err is a command of a newer format.
func IsUnreadable(err error) bool {
	var u *unreadableError
	return errors.As(err, &u)
}

// EncodeCommand encodes c: version 1 | JSON object.
func EncodeCommand(c Command) []byte {
	b, err := json.Marshal(c)
	if err != nil {
		b = []byte("{}") // a value that does not marshal was refused by parse
	}
	return append([]byte{commandVersion}, b...)
}

// DecodeCommand decodes what EncodeCommand made.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if len(b) < 1 {
		return c, fmt.Errorf("%w: empty", ErrBadCommand)
	}
	if b[0] != commandVersion {
		if b[0] > commandVersion {
			return c, &unreadableError{fmt.Sprintf("version %d", b[0])}
		}
		return c, fmt.Errorf("%w: version %d", ErrBadCommand, b[0])
	}
	dec := json.NewDecoder(bytes.NewReader(b[1:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return Command{}, &unreadableError{err.Error()}
		}
		return Command{}, fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	if c.Op != OpPut && c.Op != OpDelete {
		return Command{}, &unreadableError{fmt.Sprintf("operation %d", c.Op)}
	}
	if err := checkComponent(c.component()); err != nil {
		return Command{}, &unreadableError{fmt.Sprintf("component %q", c.Component)}
	}
	return c, nil
}

func (c Command) component() string {
	if c.Component == "" {
		return ComponentShovel
	}
	return c.Component
}

// record is c's definition record (OpPut).
func (c Command) record() record {
	r := record{VHost: c.VHost, Name: c.Name, User: c.User, Value: c.Value}
	if c.component() != ComponentShovel {
		r.Component = c.Component
	}
	return r
}

// Proposer replicates parameter commands: the cluster's metadata group.
type Proposer interface {
	// ParameterCommands reports whether commands are proposed (the
	// feature flag is enabled).
	ParameterCommands() bool
	// ProposeParameters replicates an encoded command and returns once it
	// is committed and applied on this node.
	ProposeParameters(cmd []byte) error
}

type proposerBox struct{ p Proposer }

// SetProposer makes the manager propose its changes through p once p
// says the cluster runs commands. Call it once the metadata group is
// started.
func (m *Manager) SetProposer(p Proposer) { m.proposer.Store(&proposerBox{p}) }

func (m *Manager) commandsOn() Proposer {
	box := m.proposer.Load()
	if box == nil || box.p == nil || !box.p.ParameterCommands() {
		return nil
	}
	return box.p
}

// Record is a record a command writes (Val) or deletes (Val nil).
type Record struct {
	Key string
	Val []byte
}

// ApplyCommitted applies a parameter command the cluster's metadata
// group committed: every node calls it for every such command, in log
// order. The definitions change as ApplyMeta changes them (shovels start
// and stop on goroutines of their own: this runs on the group's apply
// goroutine); the record to write or delete is returned for the caller to
// write to the node's store. A put that does not parse (proposed by a
// node that checked it) changes nothing. Applying a command twice changes
// nothing more.
func (m *Manager) ApplyCommitted(c Command) ([]Record, error) {
	k := componentKey(c.component(), c.VHost, c.Name)
	switch c.Op {
	case OpPut:
		r := c.record()
		if err := (&shovelDef{rec: r}).parse(); err != nil {
			return nil, err
		}
		data, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		go m.replace(data)
		return []Record{{Key: k, Val: data}}, nil
	case OpDelete:
		go m.remove(k)
		return []Record{{Key: k}}, nil
	}
	return nil, &unreadableError{fmt.Sprintf("operation %d", c.Op)}
}

// ApplyCommittedEntry is ApplyCommitted of an encoded command.
func (m *Manager) ApplyCommittedEntry(b []byte) ([]Record, error) {
	c, err := DecodeCommand(b)
	if err != nil {
		return nil, err
	}
	return m.ApplyCommitted(c)
}
