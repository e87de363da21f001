package mqtt

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// memStore is an in-memory MetaStore; onWrite, if set, runs inside each
// write after it is stored, as a cluster's commit hooks do before the
// write returns (read-your-writes).
type memStore struct {
	m       map[string][]byte
	onWrite func(key string, val []byte)
}

func (s *memStore) PutMeta(key string, val []byte) error {
	s.m[key] = val
	if s.onWrite != nil {
		s.onWrite(key, val)
	}
	return nil
}

func (s *memStore) DeleteMeta(key string) error {
	delete(s.m, key)
	if s.onWrite != nil {
		s.onWrite(key, nil)
	}
	return nil
}

func (s *memStore) GetMeta(key string) ([]byte, bool, error) {
	v, ok := s.m[key]
	return v, ok, nil
}

func (s *memStore) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	for k, v := range s.m {
		if strings.HasPrefix(k, prefix) {
			if err := fn(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

func retainedPub(topic, payload string) *packets.Packet {
	return &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName: topic, Payload: []byte(payload), ProtocolVersion: 4}
}

func retainedVal(t *testing.T, topic, payload string) []byte {
	t.Helper()
	b, err := json.Marshal(&retainedMsg{Topic: topic, Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRetainedApplyOrder: memory ends as the last committed record,
// whether the hook runs inside a local write (a cluster), a later write
// from another node commits while a local one is in flight, or there is
// no hook at all (standalone).
func TestRetainedApplyOrder(t *testing.T) {
	key := retainedKey("/", "a/b")
	tests := []struct {
		name    string
		onWrite func(r *retainedStore, st *memStore) func(key string, val []byte)
		want    string // payload in memory afterwards, "" none
	}{
		{"standalone", nil, "local"},
		{"hook applies the local write", func(r *retainedStore, _ *memStore) func(string, []byte) {
			return r.apply
		}, "local"},
		{"a later remote write commits before the local one returns", func(r *retainedStore, st *memStore) func(string, []byte) {
			return func(k string, v []byte) {
				r.apply(k, v)
				remote := retainedVal(t, "a/b", "remote")
				st.m[k] = remote
				r.apply(k, remote)
			}
		}, "remote"},
		{"a later remote delete commits before the local one returns", func(r *retainedStore, st *memStore) func(string, []byte) {
			return func(k string, v []byte) {
				r.apply(k, v)
				delete(st.m, k)
				r.apply(k, nil)
			}
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &memStore{m: map[string][]byte{}}
			r, err := loadRetained(st)
			if err != nil {
				t.Fatal(err)
			}
			if tc.onWrite != nil {
				st.onWrite = tc.onWrite(r, st)
			}
			if err := r.put(st, "/", retainedPub("a/b", "local")); err != nil {
				t.Fatal(err)
			}
			got := ""
			if l := r.match("/", "a/#"); len(l) == 1 {
				got = string(l[0].Payload)
			} else if len(l) > 1 {
				t.Fatalf("%d messages", len(l))
			}
			if got != tc.want {
				t.Fatalf("memory holds %q, want %q", got, tc.want)
			}
			if len(r.touched) != 0 || r.writers != 0 {
				t.Fatalf("write tracking left: %d writers, %d touched", r.writers, len(r.touched))
			}
			if _, stored := st.m[key]; stored != (tc.want != "") {
				t.Fatalf("store holds the key: %v, memory %q", stored, got)
			}
		})
	}
}

// TestRetainedApplyPrefix: a prefix delete clears the matching topics.
func TestRetainedApplyPrefix(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	r, _ := loadRetained(st)
	for _, topic := range []string{"a/1", "a/2", "b/1"} {
		// As a node applies a committed record: the store, then memory.
		st.m[retainedKey("/", topic)] = retainedVal(t, topic, "x")
		r.apply(retainedKey("/", topic), st.m[retainedKey("/", topic)])
	}
	r.applyPrefix(retainedKey("/", "a/"))
	if l := r.match("/", "#"); len(l) != 1 || l[0].Topic != "b/1" {
		t.Fatalf("left: %v", l)
	}
}

// TestRetainedRoundTrip: what a subscriber gets from the store is what
// the PUBLISH retained, MQTT 5 properties included, and the record is
// v0.1.0's (a retainedMsg in JSON).
func TestRetainedRoundTrip(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	r, _ := loadRetained(st)
	pk := retainedPub("a/b", "body")
	pk.ProtocolVersion = 5
	pk.Properties = packets.Properties{PayloadFormat: 1, PayloadFormatFlag: true, ContentType: "text/plain",
		ResponseTopic: "re/ply", CorrelationData: []byte{1, 2}, User: []packets.UserProperty{{Key: "k", Val: "v"}},
		MessageExpiryInterval: 3600, TopicAlias: 7, SubscriptionIdentifier: []int{3}}
	if err := r.put(st, "/", pk); err != nil {
		t.Fatal(err)
	}
	var stored retainedMsg
	if err := json.Unmarshal(st.m[retainedKey("/", "a/b")], &stored); err != nil {
		t.Fatal(err)
	}
	want := packets.Properties{PayloadFormat: 1, PayloadFormatFlag: true, ContentType: "text/plain",
		ResponseTopic: "re/ply", CorrelationData: []byte{1, 2}, User: []packets.UserProperty{{Key: "k", Val: "v"}},
		MessageExpiryInterval: 3600}
	if !reflect.DeepEqual(stored.Props, want) || stored.Topic != "a/b" || string(stored.Payload) != "body" || stored.QoS != 1 || stored.ExpiresAt == 0 {
		t.Fatalf("stored %+v", stored)
	}
	got := r.match("/", "a/+")
	if len(got) != 1 || !reflect.DeepEqual(*got[0], stored) {
		t.Fatalf("delivered %+v, stored %+v", got, stored)
	}
	// A record that expired is not delivered, nor is one whose store
	// record is gone.
	stored.ExpiresAt = time.Now().Unix() - 1
	val, _ := json.Marshal(&stored)
	st.m[retainedKey("/", "a/b")] = val
	r.apply(retainedKey("/", "a/b"), val)
	if got := r.match("/", "#"); len(got) != 0 {
		t.Fatalf("expired message delivered: %+v", got[0])
	}
}
