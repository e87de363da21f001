package wire

import "encoding/binary"

// Method is an AMQP 0-9-1 method: one of the generated structs such as
// *BasicPublish. Reserved fields of the specification are not exposed: they
// are skipped when decoding and written as zero.
type Method interface {
	ClassID() uint16
	MethodID() uint16
	// Name is the specification's name, such as "basic.publish".
	Name() string
	// HasContent reports whether a content header and body follow the method.
	HasContent() bool
	// Sync reports whether the method expects a reply (such as queue.declare
	// expecting queue.declare-ok).
	Sync() bool
	// AppendArgs appends the method's arguments (without class and method
	// id). It fails only for values the wire cannot carry, such as a short
	// string longer than 255 bytes.
	AppendArgs(b []byte) ([]byte, error)
	// DecodeArgs decodes the method's arguments (without class and method
	// id), which must be consumed exactly. Strings, byte slices and tables
	// are copied: the method does not alias b.
	DecodeArgs(b []byte) error
}

// DecodeMethod decodes a method frame payload: class id, method id and
// arguments. It fails with a connection-scope *Error: SyntaxError for a
// malformed payload, CommandInvalid for an unknown class or method.
func DecodeMethod(payload []byte) (Method, error) {
	classID, methodID, args, err := SplitMethod(payload)
	if err != nil {
		return nil, err
	}
	m := newMethod(classID, methodID)
	if m == nil {
		e := NewConnectionError(CommandInvalid, "unknown method %d.%d", classID, methodID)
		e.ClassID, e.MethodID = classID, methodID
		return nil, e
	}
	if err := m.DecodeArgs(args); err != nil {
		if e, ok := err.(*Error); ok {
			e.ClassID, e.MethodID = classID, methodID
			e.Text = truncate(e.Text + " in " + m.Name())
		}
		return nil, err
	}
	return m, nil
}

// MethodName returns the name of a method ("queue.declare") from its
// class and method ids, "" for none or an unknown one.
func MethodName(classID, methodID uint16) string {
	if m := newMethod(classID, methodID); m != nil {
		return m.Name()
	}
	return ""
}

// SplitMethod splits a method frame payload into class id, method id and
// arguments (aliasing payload), for a caller that decodes hot methods into
// values it reuses:
//
//	class, method, args, err := wire.SplitMethod(f.Payload)
//	if err == nil && class == wire.ClassBasic && method == wire.MethodBasicPublish {
//		err = ch.publish.DecodeArgs(args) // no allocation but the strings
//	}
//
// It fails with a SyntaxError *Error when payload is shorter than 4 bytes.
// It does not check that the ids name a method.
func SplitMethod(payload []byte) (classID, methodID uint16, args []byte, err error) {
	if len(payload) < 4 {
		return 0, 0, nil, syntaxError("method frame payload of %d bytes", len(payload))
	}
	return binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]), payload[4:], nil
}

func truncate(s string) string {
	if len(s) > 255 {
		return s[:255]
	}
	return s
}

// AppendMethod appends a method frame payload: class id, method id and
// arguments.
func AppendMethod(b []byte, m Method) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, m.ClassID())
	b = binary.BigEndian.AppendUint16(b, m.MethodID())
	return m.AppendArgs(b)
}
