package mqtt

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// Headers the front end writes on messages it publishes; they carry MQTT
// semantics through the core and are not shown to MQTT 5 clients as user
// properties.
const (
	hdrQoS       = "x-mqtt-publish-qos"    // 2 for a QoS 2 publish
	hdrRetain    = "x-mqtt-retain"         // true for a PUBLISH with the retain flag
	hdrPublisher = "x-mqtt-publisher"      // client id, for no-local
	hdrFormat    = "x-mqtt-payload-format" // MQTT 5 payload format indicator
)

// errBadEncoding: a shared PUBLISH without room for a packet id.
var errBadEncoding = errors.New("mqtt: shared PUBLISH encoding without a packet id")

// messageQoS is the QoS a message was published with: non-persistent
// messages are QoS 0, persistent ones QoS 1 unless published at QoS 2.
func messageQoS(m *exchange.Message) byte {
	if !m.Props.Persistent() {
		return 0
	}
	if n, ok := intValue(m.Props.Headers[hdrQoS]); ok && n == 2 {
		return 2
	}
	return 1
}

func intValue(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	}
	return 0, false
}

// delivery writes a core delivery as a PUBLISH, at the highest QoS of the
// session's matching subscriptions, capped by the message's own QoS.
func (w *packetWriter) delivery(d exchange.Delivery) {
	c := w.c
	m := d.Msg
	topic := w.topicOf(m.RoutingKey)
	own := d.Queue.Name() == c.se.qname
	self := false
	if p, ok := m.Props.Headers[hdrPublisher].(string); ok && p == c.clientID {
		self = true
	}
	var qos byte
	matched, rap := false, false
	var ids []int
	for _, sub := range c.se.subList() {
		if own {
			if sub.Share != "" || !wire.Match(sub.Filter, topic) {
				continue
			}
		} else if sub.queue != d.Queue.Name() {
			continue
		}
		if sub.NoLocal && self {
			continue
		}
		matched = true
		qos = max(qos, sub.QoS)
		rap = rap || sub.RAP
		if sub.ID > 0 {
			ids = append(ids, sub.ID)
		}
	}
	if !matched {
		w.settleLater(d)
		return
	}
	// A message whose expiry passed while it was queued is dropped
	// [MQTT-3.3.2-5] (the core drops expired messages only from a
	// queue's head); the rest carry their remaining lifetime. An
	// expiration of 0 (AMQP) means "now or never": the core handed it
	// over at once, so it goes out with the least interval.
	var left uint32
	if exp := m.ExpiresAt(); exp != 0 {
		ns := exp - time.Now().UnixNano()
		switch {
		case ns > 0:
			left = uint32(min((ns+int64(time.Second)-1)/int64(time.Second), math.MaxUint32))
		case m.Props.Expiration == "0":
			left = 1
		default:
			w.settleLater(d)
			return
		}
	}
	qos = min(qos, messageQoS(m))
	retain := false
	if rap {
		retain, _ = m.Props.Headers[hdrRetain].(bool)
	}
	var pid uint16
	if qos > 0 {
		var ok bool
		if pid, ok = c.allocPID(inflight{q: d.Queue, seq: d.Seq}); !ok {
			d.Queue.Reject([]uint64{d.Seq}, true)
			return
		}
	} else {
		w.settleLater(d)
	}
	c.s.cfg.Tracer.Deliver(d, tracing.MQTT(c.version))
	if c.version != 5 || (len(ids) == 0 && left == 0 && c.aliasMax == 0) {
		// Nothing of this subscriber's own in the packet but its id:
		// the bytes every such delivery of m writes.
		if b := w.sharedPublish(m, topic, qos, retain); b != nil && (c.maxOut == 0 || uint32(len(b)) <= c.maxOut) {
			w.writeShared(b, qos, qos > 0 && d.Redelivered, pid)
			return
		}
		if qos > 0 {
			// Too large for the client: dropped [MQTT-3.1.2-25].
			w.dropInflight(d, pid)
		}
		return
	}
	w.ownPublish(d, topic, qos, retain, ids, left, pid)
}

// ownPublish writes d as an MQTT 5 PUBLISH of this subscriber's own
// (subscription ids, expiry, topic alias). It is not part of delivery,
// whose frame is on every writer's stack: its packets.Packet (most of a
// kilobyte) would make a new writer goroutine grow its stack for each
// delivery.
func (w *packetWriter) ownPublish(d exchange.Delivery, topic string, qos byte, retain bool, ids []int, left uint32, pid uint16) {
	pk := w.c.publishPacket(d.Msg, topic, qos, retain, ids, left)
	pk.PacketID = pid
	pk.FixedHeader.Dup = qos > 0 && d.Redelivered
	if !w.encodePublish(&pk) && qos > 0 {
		// Too large for the client: dropped, as MQTT 5 says [MQTT-3.1.2-25].
		w.dropInflight(d, pid)
	}
}

// dropInflight gives back the packet id of a delivery that is not sent
// and settles it.
func (w *packetWriter) dropInflight(d exchange.Delivery, pid uint16) {
	w.c.infMu.Lock()
	w.c.inflight.del(pid)
	w.c.infMu.Unlock()
	w.settleLater(d)
}

// encKeys are the shared encodings of a PUBLISH (encoding.go in package
// exchange), by [MQTT 5][QoS][retain]: MQTT 3.1 and 3.1.1 PUBLISH packets
// are the same bytes. One with QoS > 0 is cached with packet id 1, and
// each delivery patches in its own id and DUP flag.
var encKeys = func() (k [2][3][2]*exchange.EncodingKey) {
	for v := range 2 {
		for q := range 3 {
			for r := range 2 {
				k[v][q][r] = exchange.NewEncodingKey(fmt.Sprintf("mqtt v5=%d qos=%d retain=%d", v, q, r))
			}
		}
	}
	return k
}()

func encKey(v5 bool, qos byte, retain bool) *exchange.EncodingKey {
	v, r := 0, 0
	if v5 {
		v = 1
	}
	if retain {
		r = 1
	}
	return encKeys[v][qos][r]
}

// sharedPublish returns m as a PUBLISH of topic (the topic every MQTT
// writer maps m's routing key to) for this connection's protocol version,
// encoded by the first writer that needed it and shared by the rest; nil
// if it does not encode. A fan-out of one publish to many sessions, each
// with its own queue, then encodes it once.
func (w *packetWriter) sharedPublish(m *exchange.Message, topic string, qos byte, retain bool) []byte {
	v5 := w.c.version == 5
	k := encKey(v5, qos, retain)
	if b := m.Encoding(k); b != nil {
		return b
	}
	var pid uint16
	if qos > 0 {
		pid = 1
	}
	var b []byte
	if !v5 {
		b = wire.AppendPublishHeader(make([]byte, 0, 9+len(topic)+len(m.Body)), topic, qos, false, retain, pid, len(m.Body))
		b = append(b, m.Body...)
	} else if b = w.encodeShared5(m, topic, qos, retain, pid); b == nil {
		return nil
	}
	return m.AddEncoding(&exchange.Encoding{Key: k, Bytes: b})
}

// encodeShared5 is sharedPublish's MQTT 5 encoding, kept out of it for
// the size of its packets.Packet (see ownPublish).
func (w *packetWriter) encodeShared5(m *exchange.Message, topic string, qos byte, retain bool, pid uint16) []byte {
	pk := w.c.publishPacket(m, topic, qos, retain, nil, 0)
	pk.PacketID = pid
	w.scratch.Reset()
	if err := pk.PublishEncode(&w.scratch); err != nil {
		return nil
	}
	return bytes.Clone(w.scratch.Bytes())
}

// writeShared writes a shared PUBLISH b: as it is at QoS 0, else with
// this delivery's packet id and DUP flag in a copy of its head.
func (w *packetWriter) writeShared(b []byte, qos byte, dup bool, pid uint16) {
	if qos > 0 {
		off, ok := wire.PublishIDOffset(b)
		if !ok {
			// Not a PUBLISH of ours; cannot happen.
			w.err = errBadEncoding
			return
		}
		w.hdr = append(w.hdr[:0], b[:off+2]...)
		if dup {
			w.hdr[0] |= 0x08
		}
		w.hdr[off], w.hdr[off+1] = byte(pid>>8), byte(pid)
		w.emit(w.hdr)
		b = b[off+2:]
	}
	w.emit(b)
	w.c.sentPublish.Add(1)
}

// topicOf maps a routing key to its topic, remembering the last one: a
// connection mostly gets runs of the same topic.
func (w *packetWriter) topicOf(key string) string {
	if key != w.lastKey || w.lastTopic == "" {
		w.lastKey, w.lastTopic = key, wire.KeyToTopic(key)
	}
	return w.lastTopic
}

// encodePublish writes pk unless it exceeds the client's maximum packet
// size, and reports whether it was written. For an MQTT 5 client that
// accepts topic aliases the topic goes as an alias: the first
// TopicAliasMaximum distinct topics of the connection get one, sent with
// the topic once and alone afterwards.
func (w *packetWriter) encodePublish(pk *packets.Packet) bool {
	var newAlias uint16
	if w.c.aliasMax > 0 {
		if a, ok := w.c.rare.outAliases[pk.TopicName]; ok {
			pk.Properties.TopicAlias, pk.Properties.TopicAliasFlag = a, true
			pk.TopicName = ""
		} else if len(w.c.rare.outAliases) < int(w.c.aliasMax) {
			newAlias = uint16(len(w.c.rare.outAliases) + 1)
			pk.Properties.TopicAlias, pk.Properties.TopicAliasFlag = newAlias, true
		}
	}
	w.scratch.Reset()
	if err := pk.PublishEncode(&w.scratch); err != nil {
		return false
	}
	if w.c.maxOut > 0 && uint32(w.scratch.Len()) > w.c.maxOut {
		return false
	}
	if newAlias != 0 {
		if w.c.rare.outAliases == nil {
			w.c.rare.outAliases = map[string]uint16{}
		}
		w.c.rare.outAliases[pk.TopicName] = newAlias
	}
	w.emit(w.scratch.Bytes())
	w.c.sentPublish.Add(1)
	return true
}

// publishPacket maps a core message onto a PUBLISH.
// expiry is the remaining message expiry interval in seconds (0: none).
func (c *conn) publishPacket(m *exchange.Message, topic string, qos byte, retain bool, ids []int, expiry uint32) packets.Packet {
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: retain},
		TopicName:       topic,
		Payload:         m.Body,
		ProtocolVersion: c.version,
	}
	if c.version != 5 {
		return pk
	}
	// mochi writes correlation data only with AllowResponseInfo.
	pk.Mods.AllowResponseInfo = true
	p := &pk.Properties
	p.SubscriptionIdentifier = ids
	p.ContentType = m.Props.ContentType
	if m.Props.ReplyTo != "" {
		p.ResponseTopic = wire.KeyToTopic(m.Props.ReplyTo)
	}
	if m.Props.CorrelationID != "" {
		p.CorrelationData = []byte(m.Props.CorrelationID)
	}
	p.MessageExpiryInterval = expiry
	if len(m.Props.Headers) > 0 {
		if f, ok := intValue(m.Props.Headers[hdrFormat]); ok {
			p.PayloadFormat, p.PayloadFormatFlag = byte(f), true
		}
		p.User = userProperties(m.Props.Headers)
	}
	return pk
}

// userProperties turns string-valued headers (except the front end's own)
// into MQTT 5 user properties, sorted by key.
func userProperties(h exchange.Table) []packets.UserProperty {
	var out []packets.UserProperty
	for k, v := range h {
		if strings.HasPrefix(k, "x-mqtt-") {
			continue
		}
		switch x := v.(type) {
		case string:
			out = append(out, packets.UserProperty{Key: k, Val: x})
		case []byte:
			out = append(out, packets.UserProperty{Key: k, Val: string(x)})
		case []any:
			for _, e := range x {
				if s, ok := e.(string); ok {
					out = append(out, packets.UserProperty{Key: k, Val: s})
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
