package mqtt

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// retainedMsg is a retained message as stored.
type retainedMsg struct {
	Topic     string                 `json:"t"`
	Payload   []byte                 `json:"p"`
	QoS       byte                   `json:"q"`
	Props     packets.Properties     `json:"props"`         // MQTT 5 message properties
	ExpiresAt int64                  `json:"exp,omitempty"` // unix seconds, 0 never
	User      []packets.UserProperty `json:"-"`
}

// retainedStore keeps the retained messages of every vhost in memory, in
// front of the store. Lookups scan a vhost's messages; retained topics
// are few compared with publishes.
//
// In a cluster the records are replicated and every node's copy follows
// the committed records through apply (cluster.go), in commit order; a
// local put leaves memory to apply when apply has seen its key since the
// put began (its own commit, or a later one from another node), so a
// slow writer never overwrites a newer record with its own.
type retainedStore struct {
	mu sync.RWMutex
	m  map[string]map[string]*retainedMsg // vhost → topic → message
	// applied counts apply's writes; while local writes are in flight
	// (writers), touched holds per key the count at apply's last write
	// of it.
	applied uint64
	writers int
	touched map[string]uint64
}

func retainedKey(vhost, topic string) string { return retainedPrefix + vhost + "\x00" + topic }

func loadRetained(st MetaStore) (*retainedStore, error) {
	r := &retainedStore{touched: map[string]uint64{}}
	return r, r.reload(st)
}

// reload replaces memory with the stored records. It holds the lock
// while it reads, so that an apply that runs meanwhile comes after it.
func (r *retainedStore) reload(st MetaStore) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m = map[string]map[string]*retainedMsg{}
	return st.LoadMeta(retainedPrefix, func(key string, val []byte) error {
		vh, _, ok := strings.Cut(strings.TrimPrefix(key, retainedPrefix), "\x00")
		if !ok {
			return nil
		}
		var msg retainedMsg
		if json.Unmarshal(val, &msg) != nil {
			return nil
		}
		r.setLocked(vh, &msg)
		return nil
	})
}

func (r *retainedStore) setLocked(vh string, msg *retainedMsg) {
	t := r.m[vh]
	if t == nil {
		t = map[string]*retainedMsg{}
		r.m[vh] = t
	}
	t[msg.Topic] = msg
}

// apply brings memory in line with a committed record of key (val nil:
// deleted). Idempotent; it takes only r.mu, which no writer holds while
// its store write is in flight.
func (r *retainedStore) apply(key string, val []byte) {
	vh, topic, ok := strings.Cut(strings.TrimPrefix(key, retainedPrefix), "\x00")
	if !ok {
		return
	}
	var msg *retainedMsg
	if val != nil {
		msg = &retainedMsg{}
		if json.Unmarshal(val, msg) != nil {
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied++
	if r.writers > 0 {
		r.touched[key] = r.applied
	}
	if msg == nil {
		delete(r.m[vh], topic)
		return
	}
	r.setLocked(vh, msg)
}

// applyPrefix applies the delete of every record whose key starts with
// prefix.
func (r *retainedStore) applyPrefix(prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied++
	for vh, topics := range r.m {
		for topic := range topics {
			if key := retainedKey(vh, topic); strings.HasPrefix(key, prefix) {
				delete(topics, topic)
				if r.writers > 0 {
					r.touched[key] = r.applied
				}
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
// (done), memory takes msg (nil: the topic's message is deleted) unless
// apply wrote key since mark, in which case memory already holds this
// write or a later one.
func (r *retainedStore) end(key, vh, topic string, mark uint64, done bool, msg *retainedMsg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writers--; r.writers == 0 {
		defer clear(r.touched)
	}
	if !done || r.touched[key] > mark {
		return
	}
	if msg == nil {
		delete(r.m[vh], topic)
		return
	}
	r.setLocked(vh, msg)
}

// put stores (or, for an empty payload, removes) the retained message of
// a PUBLISH's topic, durably, before the PUBLISH is acknowledged.
func (r *retainedStore) put(st MetaStore, vh string, pk *packets.Packet) error {
	key := retainedKey(vh, pk.TopicName)
	if len(pk.Payload) == 0 {
		mark := r.begin()
		err := st.DeleteMeta(key)
		r.end(key, vh, pk.TopicName, mark, err == nil, nil)
		return err
	}
	msg := &retainedMsg{Topic: pk.TopicName, Payload: pk.Payload, QoS: pk.FixedHeader.Qos}
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
	mark := r.begin()
	err = st.PutMeta(key, val)
	r.end(key, vh, pk.TopicName, mark, err == nil, msg)
	return err
}

// match returns the live retained messages of vh whose topic matches filter.
func (r *retainedStore) match(vh, filter string) []*retainedMsg {
	now := time.Now().Unix()
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*retainedMsg
	for topic, msg := range r.m[vh] {
		if msg.ExpiresAt != 0 && msg.ExpiresAt <= now {
			continue
		}
		if wire.Match(filter, topic) {
			out = append(out, msg)
		}
	}
	return out
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
	for _, m := range r.m {
		n += len(m)
	}
	return n
}
