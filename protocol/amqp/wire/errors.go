package wire

import (
	"errors"
	"fmt"
)

// Error is an AMQP protocol error: a reply code with its reply text, the
// scope it closes, and the method that caused it (0, 0 when none). A front
// end answers a connection-scope Error with connection.close and a
// channel-scope Error with channel.close, carrying Code, Text, ClassID and
// MethodID.
//
// Every decode failure of this package is a connection-scope *Error:
// FrameError (501) for a malformed or oversized frame, SyntaxError (502) for
// a malformed method or content header payload, CommandInvalid (503) for an
// unknown class or method id.
type Error struct {
	Code            uint16 // reply code, e.g. SyntaxError
	Text            string // reply text, "NAME - detail" as RabbitMQ writes it
	ConnectionScope bool   // true: close the connection; false: the channel
	ClassID         uint16 // class of the offending method, or 0
	MethodID        uint16 // id of the offending method, or 0
}

func (e *Error) Error() string {
	scope := "channel"
	if e.ConnectionScope {
		scope = "connection"
	}
	return fmt.Sprintf("wire: %s error %d: %s", scope, e.Code, e.Text)
}

// NewConnectionError returns a connection-scope error with a reply text of
// the form "NAME - detail", where NAME is ReplyName(code).
func NewConnectionError(code uint16, format string, args ...any) *Error {
	return &Error{Code: code, Text: replyText(code, format, args...), ConnectionScope: true}
}

// NewChannelError returns a channel-scope error with a reply text of the
// form "NAME - detail", where NAME is ReplyName(code).
func NewChannelError(code uint16, format string, args ...any) *Error {
	return &Error{Code: code, Text: replyText(code, format, args...)}
}

func replyText(code uint16, format string, args ...any) string {
	text := format
	if len(args) > 0 {
		text = fmt.Sprintf(format, args...)
	}
	if name := ReplyName(code); name != "" {
		text = name + " - " + text
	}
	if len(text) > 255 { // reply-text is a short string
		text = text[:255]
	}
	return text
}

func syntaxError(format string, args ...any) *Error {
	return NewConnectionError(SyntaxError, format, args...)
}

func frameError(format string, args ...any) *Error {
	return NewConnectionError(FrameError, format, args...)
}

// Encoding errors. They report a value that cannot be represented on the
// wire; they are programming or input-validation errors of the caller, not
// protocol errors of the peer.
var (
	// ErrShortStringTooLong is returned when a short string exceeds 255 bytes.
	ErrShortStringTooLong = errors.New("wire: short string longer than 255 bytes")
	// ErrLongStringTooLong is returned when a long string exceeds 4 GiB.
	ErrLongStringTooLong = errors.New("wire: long string longer than 4 GiB")
	// ErrUnsupportedType is wrapped by the error returned when a table holds a
	// value of a type that has no field-table encoding.
	ErrUnsupportedType = errors.New("wire: unsupported field table value type")
	// ErrTableTooDeep is returned when encoding tables and arrays that nest
	// deeper than MaxTableDepth (or refer to themselves). Decoding such
	// input fails with a SyntaxError *Error instead.
	ErrTableTooDeep = errors.New("wire: field table nesting too deep")
	// ErrBadProtocolHeader is returned by CheckProtocolHeader for anything
	// but the AMQP 0-9-1 protocol header. The server should answer with
	// ProtocolHeader and close the connection.
	ErrBadProtocolHeader = errors.New("wire: not an AMQP 0-9-1 protocol header")
)
