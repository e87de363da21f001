package stomp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// Error is a STOMP protocol error: it becomes an ERROR frame whose message
// header is Message and whose body is Detail, after which the connection
// is closed (as RabbitMQ does).
type Error struct {
	Message string
	Detail  string
}

func (e *Error) Error() string { return "stomp: " + e.Message + ": " + e.Detail }

func errorf(msg, format string, args ...any) *Error {
	return &Error{Message: msg, Detail: fmt.Sprintf(format, args...)}
}

// coreError turns a core or auth error into an ERROR frame as RabbitMQ's
// STOMP adapter words it (the AMQP error name as the message header).
func coreError(err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	var ae *auth.AccessError
	if errors.As(err, &ae) {
		return &Error{Message: "access_refused", Detail: "ACCESS_REFUSED - " + err.Error()}
	}
	var ce *exchange.Error
	if errors.As(err, &ce) {
		name := "internal_error"
		switch ce.Kind {
		case exchange.KindNotFound:
			name = "not_found"
		case exchange.KindAccessRefused:
			name = "access_refused"
		case exchange.KindResourceLocked:
			name = "resource_locked"
		case exchange.KindPreconditionFailed:
			name = "precondition_failed"
		case exchange.KindNotAllowed:
			name = "not_allowed"
		case exchange.KindResourceError:
			name = "resource_error"
		case exchange.KindCommandInvalid:
			name = "command_invalid"
		case exchange.KindNotImplemented:
			name = "not_implemented"
		}
		return &Error{Message: name, Detail: strings.ToUpper(name) + " - " + ce.Text}
	}
	return &Error{Message: "internal_error", Detail: err.Error()}
}
