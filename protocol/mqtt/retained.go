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
type retainedStore struct {
	mu sync.RWMutex
	m  map[string]map[string]*retainedMsg // vhost → topic → message
}

func retainedKey(vhost, topic string) string { return retainedPrefix + vhost + "\x00" + topic }

func loadRetained(st MetaStore) (*retainedStore, error) {
	r := &retainedStore{m: map[string]map[string]*retainedMsg{}}
	err := st.LoadMeta(retainedPrefix, func(key string, val []byte) error {
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
	return r, err
}

func (r *retainedStore) setLocked(vh string, msg *retainedMsg) {
	t := r.m[vh]
	if t == nil {
		t = map[string]*retainedMsg{}
		r.m[vh] = t
	}
	t[msg.Topic] = msg
}

// put stores (or, for an empty payload, removes) the retained message of
// a PUBLISH's topic, durably, before the PUBLISH is acknowledged.
func (r *retainedStore) put(st MetaStore, vh string, pk *packets.Packet) error {
	key := retainedKey(vh, pk.TopicName)
	if len(pk.Payload) == 0 {
		if err := st.DeleteMeta(key); err != nil {
			return err
		}
		r.mu.Lock()
		delete(r.m[vh], pk.TopicName)
		r.mu.Unlock()
		return nil
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
	if err := st.PutMeta(key, val); err != nil {
		return err
	}
	r.mu.Lock()
	r.setLocked(vh, msg)
	r.mu.Unlock()
	return nil
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
func (w *packetWriter) retained(msg *retainedMsg, sub *subscription) {
	c := w.c
	qos := min(msg.QoS, sub.QoS)
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: true},
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
