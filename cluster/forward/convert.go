package forward

import (
	"bufio"
	"io"
	"time"

	"github.com/trident-broker/trident/cluster/forward/frame"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/headers"
)

// Conversions between the core's Message and the codec's. Pure functions:
// no I/O, no locks.
//
// Properties have the same layout on both sides. Header values leave as
// they are (the codec carries every type the core allows) and come back
// as the types this node's AMQP front end decodes a client's publish into
// (headers.Table, which is the AMQP codec's Table, headers.Decimal, UTC
// times, int64 for int), so a forwarded message looks like one published
// here.

func toFrame(m *exchange.Message) frame.Message {
	return frame.Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Body: m.Body,
		Props: frame.Properties(m.Props)}
}

func toCore(fm *frame.Message) *exchange.Message {
	m := &exchange.Message{Exchange: fm.Exchange, RoutingKey: fm.RoutingKey, Body: fm.Body,
		Props: exchange.Properties(fm.Props)}
	if len(m.Props.Headers) > 0 {
		m.Props.Headers = map[string]any(inTable(m.Props.Headers))
	} else {
		m.Props.Headers = nil // as the front end decodes an empty table
	}
	return m
}

func inTable(t map[string]any) headers.Table {
	if t == nil {
		return nil
	}
	out := make(headers.Table, len(t))
	for k, v := range t {
		out[k] = inValue(v)
	}
	return out
}

func inValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return inTable(v)
	case time.Time:
		return v.UTC()
	case []any:
		for i, e := range v {
			v[i] = inValue(e)
		}
		return v
	}
	return v
}

// readFrame reads one frame. Its body is a buffer of its own, which the
// decoded frame's message body keeps.
func readFrame(br *bufio.Reader) (frame.Frame, error) {
	var h [frame.HeaderSize]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, err
	}
	n, err := frame.ParseHeader(h[:])
	if err != nil {
		return nil, err
	}
	var b []byte
	if n <= 1<<20 {
		b = make([]byte, n)
		_, err = io.ReadFull(br, b)
	} else {
		// A large frame's buffer grows as its bytes come, not at the
		// word of its header.
		b, err = io.ReadAll(io.LimitReader(br, int64(n)))
		if err == nil && len(b) < n {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		return nil, err
	}
	return frame.Decode(b)
}
