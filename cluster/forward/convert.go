package forward

import (
	"fmt"
	"math"
	"reflect"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/amqp/wire"
)

// Conversions between the core's Message and amqp091-go's Publishing and
// Delivery. Pure functions: no I/O, no locks.
//
// Header values leave as the types amqp091-go encodes faithfully (int and
// the unsigned 64-bit types become int64, which amqp091-go would otherwise
// truncate to 32 bits or refuse; nested tables become amqp.Table; decimals
// amqp.Decimal) and come back as the types this node's AMQP front end
// decodes a client's publish into (wire.Table, wire.Decimal, UTC times), so
// a forwarded message is indistinguishable from a local one.

// toPublishing converts m for basic.publish. It fails only on a header
// value that AMQP cannot carry. A message forwarded before says how many
// hops it has made with this one (m.Hops + 1); meta, if not 0, is the
// metadata index the owner must have applied before it routes it.
func toPublishing(m *exchange.Message, queue string, meta uint64) (amqp.Publishing, error) {
	p := &m.Props
	pub := amqp.Publishing{
		ContentType:     p.ContentType,
		ContentEncoding: p.ContentEncoding,
		DeliveryMode:    p.DeliveryMode,
		Priority:        p.Priority,
		CorrelationId:   p.CorrelationID,
		ReplyTo:         p.ReplyTo,
		Expiration:      p.Expiration,
		MessageId:       p.MessageID,
		Timestamp:       p.Timestamp,
		Type:            p.Type,
		UserId:          p.UserID,
		AppId:           p.AppID,
		Body:            m.Body,
	}
	if len(p.Headers) > 0 {
		t, err := outTable(p.Headers, 0)
		if err != nil {
			return amqp.Publishing{}, err
		}
		pub.Headers = t
	}
	// The owning node restores what the message was published with; a
	// message published to the queue by name needs nothing (headers cost
	// the owner a table decode per message).
	if m.Exchange != "" || m.RoutingKey != queue {
		if pub.Headers == nil {
			pub.Headers = amqp.Table{}
		}
		pub.Headers[exchange.ForwardExchangeHeader] = m.Exchange
		pub.Headers[exchange.ForwardRoutingKeyHeader] = m.RoutingKey
	}
	if m.Hops > 0 {
		if pub.Headers == nil {
			pub.Headers = amqp.Table{}
		}
		pub.Headers[exchange.ForwardHopsHeader] = int32(m.Hops) + 1
	}
	if meta > 0 && meta <= math.MaxInt64 {
		if pub.Headers == nil {
			pub.Headers = amqp.Table{}
		}
		pub.Headers[exchange.ForwardMetaIndexHeader] = int64(meta)
	}
	return pub, nil
}

// fromDelivery converts a delivery (or basic.get-ok) into a core message.
func fromDelivery(d *amqp.Delivery) *exchange.Message {
	m := &exchange.Message{
		Exchange:   d.Exchange,
		RoutingKey: d.RoutingKey,
		Body:       d.Body,
		Props: exchange.Properties{
			ContentType:     d.ContentType,
			ContentEncoding: d.ContentEncoding,
			DeliveryMode:    d.DeliveryMode,
			Priority:        d.Priority,
			CorrelationID:   d.CorrelationId,
			ReplyTo:         d.ReplyTo,
			Expiration:      d.Expiration,
			MessageID:       d.MessageId,
			Type:            d.Type,
			UserID:          d.UserId,
			AppID:           d.AppId,
		},
	}
	if !d.Timestamp.IsZero() {
		m.Props.Timestamp = d.Timestamp.UTC()
	}
	if len(d.Headers) > 0 {
		m.Props.Headers = map[string]any(inTable(d.Headers))
	}
	return m
}

func outTable(t map[string]any, depth int) (amqp.Table, error) {
	if depth >= wire.MaxTableDepth {
		return nil, fmt.Errorf("%w: table nested deeper than %d", ErrHeader, wire.MaxTableDepth)
	}
	out := make(amqp.Table, len(t))
	for k, v := range t {
		ov, err := outValue(v, depth)
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
		out[k] = ov
	}
	return out, nil
}

func outValue(v any, depth int) (any, error) {
	switch v := v.(type) {
	case nil, bool, int8, uint8, int16, uint16, int32, uint32, int64, float32, float64, string, []byte:
		return v, nil
	case int:
		return int64(v), nil
	case uint:
		if uint64(v) > math.MaxInt64 {
			return nil, fmt.Errorf("%w: uint %d", ErrHeader, v)
		}
		return int64(v), nil
	case uint64:
		if v > math.MaxInt64 {
			return nil, fmt.Errorf("%w: uint64 %d", ErrHeader, v)
		}
		return int64(v), nil
	case time.Time:
		return v, nil
	case wire.Decimal:
		return amqp.Decimal{Scale: v.Scale, Value: v.Value}, nil
	case amqp.Decimal:
		return v, nil
	case []any:
		return outArray(v, depth)
	case []wire.Table:
		a := make([]any, len(v))
		for i, t := range v {
			a[i] = map[string]any(t)
		}
		return outArray(a, depth)
	case map[string]any:
		return outTable(v, depth+1)
	case wire.Table:
		return outTable(v, depth+1)
	case amqp.Table:
		return outTable(v, depth+1)
	}
	// A named map type built on map[string]any, as the core allows.
	rv := reflect.ValueOf(v)
	tt := reflect.TypeOf(map[string]any(nil))
	if rv.Kind() == reflect.Map && rv.Type().ConvertibleTo(tt) {
		return outTable(rv.Convert(tt).Interface().(map[string]any), depth+1)
	}
	return nil, fmt.Errorf("%w: %T", ErrHeader, v)
}

func outArray(a []any, depth int) ([]any, error) {
	if depth+1 >= wire.MaxTableDepth {
		return nil, fmt.Errorf("%w: array nested deeper than %d", ErrHeader, wire.MaxTableDepth)
	}
	out := make([]any, len(a))
	for i, v := range a {
		ov, err := outValue(v, depth+1)
		if err != nil {
			return nil, err
		}
		out[i] = ov
	}
	return out, nil
}

func inTable(t amqp.Table) wire.Table {
	if len(t) == 0 {
		return nil // as the front end decodes an empty table
	}
	out := make(wire.Table, len(t))
	for k, v := range t {
		out[k] = inValue(v)
	}
	return out
}

func inValue(v any) any {
	switch v := v.(type) {
	case amqp.Table:
		return inTable(v)
	case amqp.Decimal:
		return wire.Decimal{Scale: v.Scale, Value: v.Value}
	case time.Time:
		return v.UTC()
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = inValue(e)
		}
		return out
	}
	return v
}
