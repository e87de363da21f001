package amqp

import (
	"errors"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/amqp/wire"
)

// protoError turns a core or auth error into an AMQP error with RabbitMQ's
// reply code and scope, naming the method m that caused it.
func protoError(err error, m wire.Method) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return withMethod(we, m)
	}
	var ae *auth.AccessError
	if errors.As(err, &ae) {
		return withMethod(wire.NewChannelError(wire.AccessRefused, "%s", ae.Error()), m)
	}
	var ce *exchange.Error
	if !errors.As(err, &ce) {
		return withMethod(wire.NewConnectionError(wire.InternalError, "%s", err.Error()), m)
	}
	var out *wire.Error
	switch ce.Kind {
	case exchange.KindNotFound:
		out = wire.NewChannelError(wire.NotFound, "%s", ce.Text)
	case exchange.KindAccessRefused:
		out = wire.NewChannelError(wire.AccessRefused, "%s", ce.Text)
	case exchange.KindResourceLocked:
		out = wire.NewChannelError(wire.ResourceLocked, "%s", ce.Text)
	case exchange.KindPreconditionFailed:
		out = wire.NewChannelError(wire.PreconditionFailed, "%s", ce.Text)
	case exchange.KindResourceError:
		out = wire.NewChannelError(wire.ResourceError, "%s", ce.Text)
	case exchange.KindNotAllowed:
		out = wire.NewConnectionError(wire.NotAllowed, "%s", ce.Text)
	case exchange.KindInvalidPath:
		out = wire.NewConnectionError(wire.InvalidPath, "%s", ce.Text)
	case exchange.KindCommandInvalid:
		out = wire.NewConnectionError(wire.CommandInvalid, "%s", ce.Text)
	case exchange.KindNotImplemented:
		out = wire.NewConnectionError(wire.NotImplemented, "%s", ce.Text)
	default:
		out = wire.NewConnectionError(wire.InternalError, "%s", ce.Text)
	}
	return withMethod(out, m)
}

func withMethod(e *wire.Error, m wire.Method) *wire.Error {
	if m != nil && e.ClassID == 0 {
		c := *e
		c.ClassID, c.MethodID = m.ClassID(), m.MethodID()
		return &c
	}
	return e
}

func chanErr(code uint16, m wire.Method, format string, args ...any) *wire.Error {
	return withMethod(wire.NewChannelError(code, format, args...), m)
}

func connErr(code uint16, m wire.Method, format string, args ...any) *wire.Error {
	return withMethod(wire.NewConnectionError(code, format, args...), m)
}

// toWireProps copies core properties into wire properties.
func toWireProps(w *wire.Properties, p *exchange.Properties) {
	*w = wire.Properties{
		ContentType:     p.ContentType,
		ContentEncoding: p.ContentEncoding,
		Headers:         p.Headers,
		DeliveryMode:    p.DeliveryMode,
		Priority:        p.Priority,
		CorrelationID:   p.CorrelationID,
		ReplyTo:         p.ReplyTo,
		Expiration:      p.Expiration,
		MessageID:       p.MessageID,
		Timestamp:       p.Timestamp,
		Type:            p.Type,
		UserID:          p.UserID,
		AppID:           p.AppID,
	}
}

func fromWireProps(p *exchange.Properties, w *wire.Properties) {
	*p = exchange.Properties{
		ContentType:     w.ContentType,
		ContentEncoding: w.ContentEncoding,
		DeliveryMode:    w.DeliveryMode,
		Priority:        w.Priority,
		CorrelationID:   w.CorrelationID,
		ReplyTo:         w.ReplyTo,
		Expiration:      w.Expiration,
		MessageID:       w.MessageID,
		Timestamp:       w.Timestamp,
		Type:            w.Type,
		UserID:          w.UserID,
		AppID:           w.AppID,
	}
	if w.Headers != nil {
		p.Headers = map[string]any(w.Headers)
	}
}
