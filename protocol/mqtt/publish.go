package mqtt

import (
	"strconv"
	"strings"
	"sync"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// pendingAck is a PUBACK or PUBREC waiting for the store; acks leave in the
// order their PUBLISH packets arrived [MQTT-4.6.0-2].
type pendingAck struct {
	typ  byte
	pid  uint16
	done bool
	code byte
}

// handlePublish routes an inbound PUBLISH into the core; raw is the
// packet as it came (wire.ReadRaw), nil if not at hand, and sm, if not
// nil, the pooled message whose buffer raw is (readPacket): the publish
// may become that message, else sm is dropped. The packet's strings alias
// raw's buffer, which a pooled message reuses: nothing that outlives the
// message may keep them (the topic's owned copy is c.rd.pubTopic).
func (c *conn) handlePublish(pk *packets.Packet, raw []byte, sm *sharedMsg) error {
	c.recvPublish.Add(1)
	if err := c.admitPublish(pk); err != nil {
		return err
	}
	qos := pk.FixedHeader.Qos
	if c.version == 5 {
		if code := pk.PublishValidate(c.s.cfg.TopicAliasMaximum); code != packets.CodeSuccess {
			return code
		}
		// Every QoS > 0 PUBLISH from here on is acknowledged, and gives
		// its credit back then (completeAck, handlePubrel).
		if qos > 0 && c.inQuota.Add(1) > int32(c.s.cfg.ReceiveMaximum) {
			return errProto(codeReceiveMaxExceeded, "more unacknowledged QoS 1 and 2 publishes than the receive maximum") // [MQTT-3.3.4-9]
		}
		if pk.Properties.TopicAliasFlag {
			a := pk.Properties.TopicAlias
			if a == 0 || a > c.s.cfg.TopicAliasMaximum {
				return errProto(codeTopicAliasInvalid, "topic alias out of range")
			}
			if pk.TopicName != "" {
				rd := c.readerState()
				if rd.aliasIn == nil {
					rd.aliasIn = map[uint16]string{}
				}
				rd.aliasIn[a] = strings.Clone(pk.TopicName)
			} else if t, ok := c.readerState().aliasIn[a]; ok {
				pk.TopicName = t
			} else {
				return errProto(codeProtocolError, "unknown topic alias")
			}
		}
	} else if qos > 0 && pk.PacketID == 0 {
		return errProto(codeProtocolError, "PUBLISH without packet id")
	}
	// The topic of the connection's last publish was valid (routingKey
	// keeps only such): a run of publishes to one topic checks it once.
	if rd := c.rd; (rd == nil || pk.TopicName != rd.pubTopic || rd.pubKey == "") && !wire.ValidTopic(pk.TopicName) {
		return errProto(codeTopicNameInvalid, "invalid topic name")
	}
	key := c.routingKey(pk.TopicName)
	topic := c.rd.pubTopic // not the packet's: see above (routingKey made c.rd)
	pk.TopicName = topic
	ackType := packets.Puback
	if qos == 2 {
		ackType = packets.Pubrec
	}
	if isSysTopic(topic) { // server topics (sys.go)
		err := errSysPublish
		c.logDenied("publish", topic, err)
		return c.refusePublish(pk, ackType, codeNotAuthorized, err)
	}
	ex := c.s.cfg.Exchange
	if err := c.s.users.Check(c.user, c.vh.Name(), auth.Write, "exchange", ex); err != nil {
		c.logDenied("publish", topic, err)
		return c.refusePublish(pk, ackType, codeNotAuthorized, err)
	}
	if err := c.checkTopic(auth.Write, topic, false); err != nil {
		c.logDenied("publish", topic, err)
		return c.refusePublish(pk, ackType, codeNotAuthorized, err)
	}
	if qos == 2 {
		se := c.se
		se.mu.Lock()
		_, dup := se.qos2InMap()[pk.PacketID]
		if !dup {
			se.addQoS2In(pk.PacketID, c)
			se.qos2Dirty.Store(true)
		}
		se.mu.Unlock()
		if dup {
			// Already received and stored: acknowledge again, publish
			// once. Its credit is the first copy's.
			if c.version == 5 {
				c.inQuota.Add(-1)
			}
			c.completeAck(c.pushAck(ackType, pk.PacketID), codeSuccess)
			return nil
		}
	}
	if pk.FixedHeader.Retain {
		if err := c.s.retained.put(c.s.shared, c.vh.Name(), pk); err != nil {
			c.s.log.Error("store retained message", "topic", topic, "err", err)
			return c.refusePublish(pk, ackType, codeUnspecified, err)
		}
	}
	m := c.toMessage(pk, raw, sm, ex, key)
	opts := exchange.PublishOpts{Batch: &c.br.batch, Route: &c.rd.route}
	var tag uint64
	if qos > 0 {
		tag = c.pushAck(ackType, pk.PacketID)
		opts.Confirmer, opts.Tag, opts.Protocol = c, tag, exchange.ProtoMQTT
	}
	sp := c.s.cfg.Tracer.Publish(m, tracing.MQTT(c.version))
	res, err := c.vh.Publish(m, opts)
	sp.End(res.Routed, err)
	if res.Solo {
		m.Release() // not touched after this
	}
	if qos == 0 {
		return nil
	}
	switch {
	case err != nil:
		c.s.log.Warn("publish", "client_id", c.clientID, "err", err)
		c.completeAck(tag, codeUnspecified)
	case res.Pending:
	case !res.OK:
		c.completeAck(tag, codeQuotaExceeded)
	case res.Routed == 0 && c.version == 5:
		c.completeAck(tag, codeNoMatchingSubscribers)
	default:
		c.completeAck(tag, codeSuccess)
	}
	return nil
}

// refusePublish answers a PUBLISH that is not routed: MQTT 5 gets the
// reason code in PUBACK/PUBREC (QoS 0: dropped); MQTT 3 has no negative
// acknowledgement, so the connection is closed, as RabbitMQ does.
func (c *conn) refusePublish(pk *packets.Packet, ackType, code byte, err error) error {
	if c.version != 5 {
		return err
	}
	if pk.FixedHeader.Qos > 0 {
		c.completeAck(c.pushAck(ackType, pk.PacketID), code)
	}
	return nil
}

// routingKey maps topic to its routing key, remembering the last one
// (reader goroutine only). Both are copies that own their bytes: topic
// may alias a packet buffer that is reused.
func (c *conn) routingKey(topic string) string {
	rd := c.readerState()
	if topic != rd.pubTopic || rd.pubKey == "" {
		rd.pubTopic = strings.Clone(topic)
		rd.pubKey = wire.TopicToKey(rd.pubTopic)
	}
	return rd.pubKey
}

// readerState is the reader's publish state: made when a publish or an
// acknowledgement first needs it, dropped when the connection parks
// with nothing in it that must last (dropIdleState). An idle device's
// connection is 64 bytes smaller without it (640 bytes, not 704).
type readerState struct {
	// aliasIn is the client's topic aliases (MQTT 5), kept for the
	// connection's life once one is set.
	aliasIn map[uint16]string
	// pubTopic's routing key is pubKey: a publisher mostly sends runs of
	// the same topic (routingKey).
	pubTopic, pubKey string
	// route is the last publish's route (exchange.RouteCache).
	route exchange.RouteCache
	// PUBACKs not yet handed to the core (settle).
	ackQ    *exchange.Queue
	ackSeqs []uint64
}

// readerState returns c.rd, made if need be (reader goroutine only).
func (c *conn) readerState() *readerState {
	if c.rd == nil {
		c.rd = &readerState{}
	}
	return c.rd
}

// sharedMsg is a message published at QoS 0 or 1 and the packet it came in
// (its body aliases it) as the encoding every subscriber of the same
// protocol version gets, in one allocation. Unless it was retained or is
// over 1 KiB it is reused: it comes from sharedPools with its buffer and
// goes back once the core is done with the message
// (exchange.Message.Reuse); pool is nil otherwise.
type sharedMsg struct {
	m    exchange.Message
	enc  exchange.Encoding
	buf  []byte
	pool *sync.Pool
}

// Recycle implements exchange.Recycler.
func (sm *sharedMsg) Recycle(*exchange.Message) {
	sm.enc = exchange.Encoding{}
	sm.pool.Put(sm)
}

// sharedSizes are the size classes of sharedMsg buffers (a whole PUBLISH
// packet), each about 1.5 times the one before, so that a buffer is at
// most a third unused: the queues' memory budget counts a message's body,
// not its buffer.
var sharedSizes = [...]int{64, 96, 128, 192, 256, 384, 512, 768, 1024}

var sharedPools [len(sharedSizes)]sync.Pool

// pooledPublish returns a pooled message with a buffer for the PUBLISH
// whose fixed header is h, if it can become one: QoS 0 or 1, no retain flag,
// at most 1 KiB. Else nil, and the packet is read into a buffer of its
// own.
func pooledPublish(h wire.Header) *sharedMsg {
	if h.First>>4 != packets.Publish || (h.First&0x07 != 0 && h.First&0x07 != 0x02) { // QoS 0 or 1, not retained
		return nil
	}
	n := h.Remaining + 5
	for i, size := range sharedSizes {
		if n <= size {
			p := &sharedPools[i]
			if sm, _ := p.Get().(*sharedMsg); sm != nil {
				return sm
			}
			return &sharedMsg{buf: make([]byte, 0, size), pool: p}
		}
	}
	return nil
}

// toMessage maps a PUBLISH onto a core message with routing key key.
// raw, if not nil, is the packet as it came (wire.ReadRaw): at QoS 0 or 1,
// from an MQTT 3 client or an MQTT 5 one that sent no properties, it is,
// once its DUP and retain flags are cleared, the PUBLISH every subscriber
// of the same version and QoS gets (at QoS 1 with the publisher's packet
// id, which each delivery patches: writeShared), so a QoS 1 publish costs
// no encoding at delivery either (the topic goes back and forth between topic and key
// unchanged, and ReadRaw writes the remaining length in its shortest
// form), and it is cached on the message as that (deliver.go), with the
// payload aliasing it. sm, if not nil, is the pooled message whose buffer
// raw is (pooledPublish): the message is then sm's, reusable.
func (c *conn) toMessage(pk *packets.Packet, raw []byte, sm *sharedMsg, ex, key string) *exchange.Message {
	qos := pk.FixedHeader.Qos
	var m *exchange.Message
	if raw == nil || qos > 1 || (c.version == 5 && !noProps(raw, qos)) {
		// (An MQTT 5 packet with properties is not reused either: they
		// would alias its buffer.)
		m = &exchange.Message{}
	} else {
		if sm == nil {
			sm = &sharedMsg{} // not pooled (retained, or over 1 KiB)
		}
		m = &sm.m
		if sm.pool != nil {
			m.Reuse(sm)
		}
		raw[0] = packets.Publish<<4 | qos<<1 // DUP and retain cleared
		sm.enc = exchange.Encoding{Key: encKey(c.version == 5, qos, false), Bytes: raw}
		m.AddEncoding(&sm.enc)
	}
	m.Exchange, m.RoutingKey, m.Body = ex, key, pk.Payload
	m.Props.DeliveryMode = 1
	if qos > 0 {
		m.Props.DeliveryMode = 2
	}
	var h exchange.Table
	set := func(k string, v any) {
		if h == nil {
			h = exchange.Table{}
		}
		h[k] = v
	}
	if qos == 2 {
		set(hdrQoS, uint8(2))
	}
	if pk.FixedHeader.Retain {
		set(hdrRetain, true)
	}
	if c.noLocal.Load() {
		set(hdrPublisher, c.clientID)
	}
	if c.version == 5 {
		p := &pk.Properties
		m.Props.ContentType = p.ContentType
		if p.ResponseTopic != "" {
			m.Props.ReplyTo = wire.TopicToKey(p.ResponseTopic)
		}
		if len(p.CorrelationData) > 0 {
			m.Props.CorrelationID = string(p.CorrelationData)
		}
		if p.MessageExpiryInterval > 0 {
			m.Props.Expiration = strconv.FormatUint(uint64(p.MessageExpiryInterval)*1000, 10)
		}
		if p.PayloadFormatFlag {
			set(hdrFormat, p.PayloadFormat)
		}
		for _, u := range p.User {
			switch old := h[u.Key].(type) {
			case nil:
				set(u.Key, u.Val)
			case string:
				h[u.Key] = []any{old, u.Val}
			case []any:
				h[u.Key] = append(old, u.Val)
			}
		}
	}
	m.Props.Headers = h
	return m
}

// noProps reports whether raw, an MQTT 5 PUBLISH at QoS 0 or 1, has an
// empty property list (its length, right after the topic and the packet
// id if any, is 0).
func noProps(raw []byte, qos byte) bool {
	off, ok := wire.PublishIDOffset(raw) // where a packet id would be
	if qos > 0 {
		off += 2
	}
	return ok && off < len(raw) && raw[off] == 0
}

// pushAck reserves the next place in the acknowledgement order.
func (c *conn) pushAck(typ byte, pid uint16) uint64 {
	c.ackMu.Lock()
	tag := c.ackBase + uint64(len(c.acks))
	c.acks = append(c.acks, pendingAck{typ: typ, pid: pid})
	c.ackMu.Unlock()
	return tag
}

// Confirm implements exchange.Confirmer: the store has the message.
func (c *conn) Confirm(tag uint64, ok bool) {
	code := codeSuccess
	if !ok {
		code = codeUnspecified
	}
	c.completeAck(tag, code)
}

// completeAck settles the acknowledgement at tag and sends every settled
// one at the head of the order.
func (c *conn) completeAck(tag uint64, code byte) {
	c.ackMu.Lock()
	i := tag - c.ackBase
	if i >= uint64(len(c.acks)) {
		c.ackMu.Unlock()
		return
	}
	c.acks[i].done, c.acks[i].code = true, code
	n := 0
	for n < len(c.acks) && c.acks[n].done {
		n++
	}
	if n == 0 {
		c.ackMu.Unlock()
		return
	}
	failed, start := false, false
	var credit int32
	c.ob.Mu.Lock()
	for _, a := range c.acks[:n] {
		if a.code >= codeUnspecified && c.version != 5 {
			failed = true
			continue
		}
		if a.typ == packets.Puback || a.code >= codeUnspecified {
			credit++ // a successful PUBREC's credit returns with PUBCOMP
		}
		start = c.queueLocked(outItem{kind: itemAck, typ: a.typ, pid: a.pid, code: a.code}, itemCost) || start
	}
	c.ob.Mu.Unlock()
	if c.version == 5 && credit > 0 {
		c.inQuota.Add(-credit)
	}
	for _, a := range c.acks[:n] {
		if a.typ == packets.Pubrec && a.code >= codeUnspecified {
			c.se.mu.Lock()
			delete(c.se.qos2InMap(), a.pid)
			c.se.mu.Unlock()
			c.se.qos2Dirty.Store(true)
		}
	}
	c.acks = append(c.acks[:0], c.acks[n:]...)
	c.ackBase += uint64(n)
	c.ackMu.Unlock()
	if start {
		c.s.run.start(c, runWrite)
	}
	if failed {
		// MQTT 3 cannot refuse a message: close, and the client resends.
		c.serverDisconnect(codeUnspecified)
	}
}

// handlePuback settles an outbound QoS 1 delivery. An MQTT 5 PUBACK with
// an error reason code (0x80 or above) rejects the message when its queue
// has x-retry-delays, so that it comes back after the next delay (retry.go);
// otherwise it is an acknowledgement, as in RabbitMQ.
func (c *conn) handlePuback(pid uint16, code byte) {
	c.infMu.Lock()
	f, ok := c.inflight.get(pid)
	if ok && !f.released {
		c.inflight.del(pid)
	}
	c.infMu.Unlock()
	if !ok || f.released || f.q == nil {
		return
	}
	if code >= codeUnspecified && c.version == 5 && len(f.q.RetryDelays()) > 0 {
		c.flushSettles()
		f.q.Reject([]uint64{f.seq}, false)
		return
	}
	c.settle(f.q, f.seq)
}

// handlePubrec settles an outbound QoS 2 delivery with the core (the
// client has it now) and answers PUBREL.
func (c *conn) handlePubrec(pid uint16, code byte) {
	c.infMu.Lock()
	f, ok := c.inflight.get(pid)
	if ok {
		if code >= codeUnspecified {
			c.inflight.del(pid)
		} else {
			c.inflight.set(pid, inflight{released: true})
		}
	}
	c.infMu.Unlock()
	if !ok {
		if c.version == 5 {
			c.sendAck(packets.Pubrel, pid, 0x92) // packet identifier not found
		}
		return
	}
	if code >= codeUnspecified {
		if !f.released && f.q != nil {
			f.q.Ack(f.seq)
		}
		return
	}
	// The PUBREL, and after it the core acknowledgement, wait for a
	// persistent session's record to hold the packet id (qos2.go).
	it := outItem{kind: itemAck, typ: packets.Pubrel, pid: pid}
	if !f.released {
		c.se.qos2Dirty.Store(true)
		if f.q != nil {
			it.d = exchange.Delivery{Queue: f.q, Seq: f.seq}
		}
	}
	c.push(it)
}

func (c *conn) handlePubcomp(pid uint16) {
	c.infMu.Lock()
	f, ok := c.inflight.get(pid)
	if ok && f.released {
		c.inflight.del(pid)
	}
	c.infMu.Unlock()
	if ok && f.released {
		c.se.qos2Dirty.Store(true) // written with the next record
	}
}

// handlePubrel completes an inbound QoS 2 exchange.
func (c *conn) handlePubrel(pid uint16) {
	se := c.se
	se.mu.Lock()
	in := se.qos2InMap()
	owner, ok := in[pid]
	delete(in, pid)
	se.mu.Unlock()
	if ok {
		se.qos2Dirty.Store(true)
	}
	if ok && owner == c && c.version == 5 {
		c.inQuota.Add(-1)
	}
	code := codeSuccess
	if !ok && c.version == 5 {
		code = 0x92 // packet identifier not found
	}
	c.sendAck(packets.Pubcomp, pid, code)
}
