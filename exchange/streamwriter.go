package exchange

import (
	"github.com/trident-broker/trident/exchange/headers"
	"github.com/trident-broker/trident/exchange/streamlog"
)

// A stream publish's named producer and filter value, as a Message carries
// them (stream.Writer), and how they travel to a clustered stream's leader.

// SetStreamWriter marks m as publishing id seq of the stream producer
// named ref (RabbitMQ's stream protocol, a publisher with a reference): a
// stream that already appended an id of ref as high or higher does not
// append it again (it confirms it). Other queues ignore it. An empty ref
// clears it.
func (m *Message) SetStreamWriter(ref string, seq uint64) {
	m.setStream(ref, seq, m.StreamFilter())
}

// SetStreamFilter sets m's filter value (RabbitMQ 3.13's stream
// filtering: publish version 2), kept in its stream record; "" clears it.
func (m *Message) SetStreamFilter(v string) {
	var ref string
	var seq uint64
	if m.writer != nil {
		ref, seq = m.writer.Ref, m.writer.Seq
	}
	m.setStream(ref, seq, v)
}

// StreamFilter returns m's filter value, "" if none.
func (m *Message) StreamFilter() string {
	if m.writer == nil {
		return ""
	}
	return m.writer.Filter
}

func (m *Message) setStream(ref string, seq uint64, filter string) {
	if ref == "" && filter == "" {
		m.writer = nil
		return
	}
	if ref == "" {
		seq = 0
	}
	m.writer = &streamlog.Writer{Ref: ref, Seq: seq, Filter: filter}
}

// --- across nodes ---

// writerHeader carries a named producer's reference and publishing id
// (and the filter value) on a publish a follower forwards to the stream's
// leader (the inter-node codec has no field for them): a table {"ref":
// string, "seq": int64 (the id's bits), "filter": string}. The leader takes it off a forwarded message (Hops > 0)
// only; a follower takes it off a message of its own clients before it
// forwards one, so no client can name another's producer through it.
const writerHeader = "x-trident-stream-writer"

// forwardable returns m as it goes to the leader: with its producer in
// writerHeader, or without a writerHeader a client set. m itself is not
// changed (other queues may hold it).
func forwardable(m *Message) *Message {
	_, forged := m.Props.Headers[writerHeader]
	if m.writer == nil && (!forged || m.Hops > 0) {
		return m
	}
	c := &Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body, Hops: m.Hops,
		ts: m.ts, expiresAt: m.expiresAt, writer: m.writer}
	h := make(Table, len(m.Props.Headers)+1)
	for k, v := range m.Props.Headers {
		if k != writerHeader {
			h[k] = v
		}
	}
	if w := m.writer; w != nil {
		h[writerHeader] = Table{"ref": w.Ref, "seq": int64(w.Seq), "filter": w.Filter}
	}
	if len(h) == 0 {
		h = nil
	}
	c.Props.Headers = h
	return c
}

// takeForwardedWriter moves writerHeader of a forwarded message (Hops >
// 0) into m.writer, or drops it from a copy forwardable made that came
// back to this node (a proxy's held publishes, handed back when this node
// took the lead: m.writer is set), and reports whether it changed m (the
// caller encodes it again). Such a message is this node's own copy,
// published to this stream alone. A client's own header on a message
// published here stays as the client sent it, meaning nothing.
func takeForwardedWriter(m *Message) bool {
	if len(m.Props.Headers) == 0 {
		return false
	}
	v, ok := m.Props.Headers[writerHeader]
	if !ok || (m.Hops == 0 && m.writer == nil) {
		return false
	}
	h := make(Table, len(m.Props.Headers))
	for k, x := range m.Props.Headers {
		if k != writerHeader {
			h[k] = x
		}
	}
	if len(h) == 0 {
		h = nil
	}
	m.Props.Headers = h
	if m.writer != nil {
		return true
	}
	var t map[string]any
	switch x := v.(type) {
	case headers.Table: // as the inter-node codec decodes it
		t = x
	case map[string]any:
		t = x
	}
	ref, _ := t["ref"].(string)
	seq, _ := t["seq"].(int64)
	filter, _ := t["filter"].(string)
	m.setStream(ref, uint64(seq), filter)
	return true
}
