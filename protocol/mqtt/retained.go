package mqtt

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// retainedMsg is a retained message as stored.
type retainedMsg struct {
	Topic     string                 `json:"t"`
	Payload   []byte                 `json:"p"`
	QoS       byte                   `json:"q"`
	Props     packets.Properties     `json:"props"`         // MQTT 5 message properties
	ExpiresAt int64                  `json:"exp,omitempty"` // unix seconds, 0 never
	StoredAt  int64                  `json:"ts,omitempty"`  // unix milliseconds, for management (admin.go)
	User      []packets.UserProperty `json:"-"`
}

// retainedStore indexes the retained messages of every vhost in memory
// (retainedindex.go: a topic trie of references, no bodies) in front of
// the store, which holds the records and is read when a message is
// delivered. The record format is v0.1.0's (a retainedMsg in JSON under
// retainedKey), unchanged.
//
// In a cluster the records are replicated and every node's index follows
// the committed records through apply (cluster.go), in commit order,
// each after the node's store has the record; a local put leaves memory
// to apply when apply has seen its key since the put began (its own
// commit, or a later one from another node), so a slow writer never
// overwrites a newer record with its own.
type retainedStore struct {
	st MetaStore

	mu sync.RWMutex
	m  map[string]*retainedIndex // vhost → its topics
	// applied counts apply's writes; while local writes are in flight
	// (writers), touched holds per key the count at apply's last write
	// of it.
	applied uint64
	writers int
	touched map[string]uint64
}

func retainedKey(vhost, topic string) string { return retainedPrefix + vhost + "\x00" + topic }

// retainedFields are the fields of a record that put writes (its
// other properties are always zero): decoding only these takes half the
// time of a whole retainedMsg.
type retainedFields struct {
	Topic     string `json:"t"`
	Payload   []byte `json:"p"`
	QoS       byte   `json:"q"`
	ExpiresAt int64  `json:"exp"`
	StoredAt  int64  `json:"ts"`
	Props     struct {
		CorrelationData       []byte                 `json:"cd"`
		User                  []packets.UserProperty `json:"user"`
		ContentType           string                 `json:"ct"`
		ResponseTopic         string                 `json:"rt"`
		MessageExpiryInterval uint32                 `json:"me"`
		PayloadFormat         byte                   `json:"pf"`
		PayloadFormatFlag     bool                   `json:"fpf"`
	} `json:"props"`
}

// decodeRetained decodes a stored record.
func decodeRetained(val []byte) (*retainedMsg, error) {
	var f retainedFields
	if err := json.Unmarshal(val, &f); err != nil {
		return nil, err
	}
	p := &f.Props
	return &retainedMsg{Topic: f.Topic, Payload: f.Payload, QoS: f.QoS, ExpiresAt: f.ExpiresAt, StoredAt: f.StoredAt,
		Props: packets.Properties{CorrelationData: p.CorrelationData, User: p.User, ContentType: p.ContentType,
			ResponseTopic: p.ResponseTopic, MessageExpiryInterval: p.MessageExpiryInterval,
			PayloadFormat: p.PayloadFormat, PayloadFormatFlag: p.PayloadFormatFlag}}, nil
}

// retainedHead is the part of a record the index keeps.
type retainedHead struct {
	QoS       byte  `json:"q"`
	ExpiresAt int64 `json:"exp"`
}

// refOf returns the index's reference to the record val; ok is false if
// val does not decode (such a record is left out, as v0.1.0 did).
func refOf(val []byte) (retainedRef, bool) {
	var h retainedHead
	if json.Unmarshal(val, &h) != nil {
		return retainedRef{}, false
	}
	return makeRef(len(val), h.QoS, h.ExpiresAt), true
}

func loadRetained(st MetaStore) (*retainedStore, error) {
	r := &retainedStore{st: st, touched: map[string]uint64{}}
	return r, r.reload(st)
}

// reload replaces memory with the stored records. It holds the lock
// while it reads, so that an apply that runs meanwhile comes after it.
func (r *retainedStore) reload(st MetaStore) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st = st
	r.m = map[string]*retainedIndex{}
	return st.LoadMeta(retainedPrefix, func(key string, val []byte) error {
		vh, topic, ok := strings.Cut(strings.TrimPrefix(key, retainedPrefix), "\x00")
		if !ok {
			return nil
		}
		if ref, ok := refOf(val); ok {
			r.setLocked(vh, topic, ref)
		}
		return nil
	})
}

func (r *retainedStore) setLocked(vh, topic string, ref retainedRef) {
	x := r.m[vh]
	if x == nil {
		x = &retainedIndex{}
		r.m[vh] = x
	}
	x.set(topic, ref)
}

func (r *retainedStore) delLocked(vh, topic string) {
	x := r.m[vh]
	if x == nil {
		return
	}
	x.del(topic)
	if x.n == 0 {
		delete(r.m, vh)
	}
}

// apply brings memory in line with a committed record of key (val nil:
// deleted). Idempotent; it takes only r.mu, which no writer holds while
// its store write is in flight.
func (r *retainedStore) apply(key string, val []byte) {
	vh, topic, ok := strings.Cut(strings.TrimPrefix(key, retainedPrefix), "\x00")
	if !ok {
		return
	}
	var ref retainedRef
	if val != nil {
		if ref, ok = refOf(val); !ok {
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied++
	if r.writers > 0 {
		r.touched[key] = r.applied
	}
	if val == nil {
		r.delLocked(vh, topic)
		return
	}
	r.setLocked(vh, topic, ref)
}

// applyPrefix applies the delete of every record whose key starts with
// prefix.
func (r *retainedStore) applyPrefix(prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied++
	for vh, x := range r.m {
		var gone []string
		x.each(func(topic []byte, _ retainedRef) {
			if key := retainedKey(vh, string(topic)); strings.HasPrefix(key, prefix) {
				gone = append(gone, string(topic))
			}
		})
		for _, topic := range gone {
			r.delLocked(vh, topic)
			if r.writers > 0 {
				r.touched[retainedKey(vh, topic)] = r.applied
			}
		}
	}
}

// begin marks the start of a local write, for end.
func (r *retainedStore) begin() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writers++
	return r.applied
}

// end finishes a local write of key begun at mark: if it succeeded
// (done), memory takes ref (unset: the topic's message is deleted)
// unless apply wrote key since mark, in which case memory already holds
// this write or a later one.
func (r *retainedStore) end(key, vh, topic string, mark uint64, done bool, ref retainedRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writers--; r.writers == 0 {
		defer clear(r.touched)
	}
	if !done || r.touched[key] > mark {
		return
	}
	if !ref.set() {
		r.delLocked(vh, topic)
		return
	}
	r.setLocked(vh, topic, ref)
}

// put stores (or, for an empty payload, removes) the retained message of
// a PUBLISH's topic, durably, before the PUBLISH is acknowledged.
func (r *retainedStore) put(st recordWriter, vh string, pk *packets.Packet) error {
	key := retainedKey(vh, pk.TopicName)
	if len(pk.Payload) == 0 {
		mark := r.begin()
		err := st.DeleteMeta(key)
		r.end(key, vh, pk.TopicName, mark, err == nil, retainedRef{})
		return err
	}
	msg := &retainedMsg{Topic: pk.TopicName, Payload: pk.Payload, QoS: pk.FixedHeader.Qos, StoredAt: time.Now().UnixMilli()}
	if pk.ProtocolVersion == 5 {
		p := pk.Properties
		msg.Props = packets.Properties{PayloadFormat: p.PayloadFormat, PayloadFormatFlag: p.PayloadFormatFlag,
			ContentType: p.ContentType, ResponseTopic: p.ResponseTopic, CorrelationData: p.CorrelationData,
			User: p.User, MessageExpiryInterval: p.MessageExpiryInterval}
		if p.MessageExpiryInterval > 0 {
			msg.ExpiresAt = time.Now().Unix() + int64(p.MessageExpiryInterval)
		}
	}
	val, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	ref := makeRef(len(val), msg.QoS, msg.ExpiresAt)
	mark := r.begin()
	err = st.PutMeta(key, val)
	r.end(key, vh, pk.TopicName, mark, err == nil, ref)
	return err
}

// metaGetter is a MetaStore that reads one record by its key (the
// node's stores do); without it a read is a prefix scan that stops at
// the first key.
type metaGetter interface {
	GetMeta(key string) (val []byte, found bool, err error)
}

// getMeta reads the record of key from st.
func getMeta(st MetaStore, key string) (val []byte, found bool, err error) {
	if g, ok := st.(metaGetter); ok {
		return g.GetMeta(key)
	}
	err = st.LoadMeta(key, func(k string, v []byte) error {
		if k == key {
			val, found = v, true
		}
		return errFound // keys come in order: key itself is first if present
	})
	if err == errFound {
		err = nil
	}
	return val, found, err
}

// match returns the live retained messages of vh whose topic matches
// filter (matchEach's).
func (r *retainedStore) match(vh, filter string) []*retainedMsg {
	var out []*retainedMsg
	r.matchEach(vh, filter, func(msg *retainedMsg) { out = append(out, msg) })
	return out
}

// matchEach calls fn with each live retained message of vh whose topic
// matches filter, as it is read: the index names them, under the lock,
// then the store gives their bodies one by one, so that the first is on
// its way while the next is read. A message cleared or replaced between
// the two is skipped or given as it is now.
func (r *retainedStore) matchEach(vh, filter string, fn func(*retainedMsg)) {
	now := time.Now().Unix()
	var topics []string
	r.mu.RLock()
	st := r.st
	if x := r.m[vh]; x != nil {
		x.match(filter, func(topic []byte, ref retainedRef) {
			if ref.live(now) {
				topics = append(topics, string(topic))
			}
		})
	}
	r.mu.RUnlock()
	for _, topic := range topics {
		val, found, err := getMeta(st, retainedKey(vh, topic))
		if err != nil || !found {
			continue
		}
		msg, err := decodeRetained(val)
		if err != nil || (msg.ExpiresAt != 0 && msg.ExpiresAt <= now) {
			continue
		}
		msg.Topic = topic
		fn(msg)
	}
}

// retained writes a retained message for a new subscription, retain flag
// set. A QoS >= 1 retained message takes a packet id but no core queue:
// its PUBACK settles nothing.
func (w *packetWriter) retained(msg *retainedMsg, sub *subscription, retain bool) {
	c := w.c
	qos := min(msg.QoS, sub.QoS)
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: retain},
		TopicName:       msg.Topic,
		Payload:         msg.Payload,
		ProtocolVersion: c.version,
	}
	if c.version == 5 {
		pk.Mods.AllowResponseInfo = true // for correlation data
		pk.Properties = msg.Props
		if msg.ExpiresAt != 0 {
			left := msg.ExpiresAt - time.Now().Unix()
			if left <= 0 {
				return
			}
			pk.Properties.MessageExpiryInterval = uint32(left)
		}
		if sub.ID > 0 {
			pk.Properties.SubscriptionIdentifier = []int{sub.ID}
		}
	}
	if qos > 0 {
		pid, ok := c.allocPID(inflight{})
		if !ok {
			return
		}
		pk.PacketID = pid
	}
	if !w.encodePublish(&pk) && qos > 0 {
		c.infMu.Lock()
		c.inflight.del(pk.PacketID)
		c.infMu.Unlock()
	}
}

// count is the number of retained messages of every vhost.
func (r *retainedStore) count() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, x := range r.m {
		n += x.n
	}
	return n
}
