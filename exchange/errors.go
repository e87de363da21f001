package exchange

import (
	"errors"
	"fmt"
)

// Kind classifies a core error. Front ends map a Kind to their protocol's
// error (AMQP reply code and scope, MQTT reason code, STOMP ERROR frame).
type Kind uint8

// The kinds of core error. The comment names the AMQP reply code that the
// AMQP front end uses, which is also what RabbitMQ does.
const (
	KindNotFound           Kind = iota + 1 // 404 channel
	KindAccessRefused                      // 403 channel
	KindResourceLocked                     // 405 channel
	KindPreconditionFailed                 // 406 channel
	KindNotAllowed                         // 530 connection
	KindInternal                           // 541 connection
	KindResourceError                      // 506 channel
	KindInvalidPath                        // 402 connection
	KindCommandInvalid                     // 503 connection
	KindNotImplemented                     // 540 connection
)

// Error is a core error: a kind and a RabbitMQ-style message text such as
// "no queue 'q' in vhost '/'". Front ends prefix it with the code name.
type Error struct {
	Kind Kind
	Text string
}

func (e *Error) Error() string { return "exchange: " + e.Text }

func errorf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Text: fmt.Sprintf(format, args...)}
}

// KindOf returns the Kind of err, or KindInternal if err is not an *Error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// NotAppended reports whether err says that a message log never appended
// the op (and never will): some error in its chain has a method
// NotAppended() bool that returns true (cluster/quorum.NotAppendedError).
func NotAppended(err error) bool {
	var na interface{ NotAppended() bool }
	return errors.As(err, &na) && na.NotAppended()
}
