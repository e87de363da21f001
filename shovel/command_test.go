package shovel

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// memStore is a Store in memory; puts counts the writes made through it.
type memStore struct {
	mu   sync.Mutex
	m    map[string][]byte
	puts int
}

func (s *memStore) PutMeta(key string, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	s.m[key] = append([]byte(nil), val...)
	return nil
}

func (s *memStore) DeleteMeta(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	delete(s.m, key)
	return nil
}

func (s *memStore) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	s.mu.Lock()
	m := map[string][]byte{}
	for k, v := range s.m {
		if strings.HasPrefix(k, prefix) {
			m[k] = v
		}
	}
	s.mu.Unlock()
	for k, v := range m {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	return ok
}

// paramLog is a Proposer over managers: a command is applied on each, in
// one order, and the records each returns go to its store (as the
// metadata group's FSM writes them).
type paramLog struct {
	mu       sync.Mutex
	ms       []*Manager
	stores   []*memStore
	proposed []Command
}

func (l *paramLog) ParameterCommands() bool { return true }

func (l *paramLog) ProposeParameters(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := DecodeCommand(b)
	if err != nil {
		return err
	}
	l.proposed = append(l.proposed, c)
	for i, m := range l.ms {
		recs, err := m.ApplyCommittedEntry(b)
		if err != nil {
			return err
		}
		st := l.stores[i]
		st.mu.Lock()
		for _, r := range recs {
			if r.Val == nil {
				delete(st.m, r.Key)
			} else {
				st.m[r.Key] = r.Val
			}
		}
		st.mu.Unlock()
	}
	return nil
}

// TestParameterCommandCodec: a command round-trips; a newer version,
// operation, component or field is unreadable, broken bytes are
// ErrBadCommand.
func TestParameterCommandCodec(t *testing.T) {
	c := Command{Op: OpPut, Actor: "admin", Component: ComponentMQTTBridge, VHost: "/", Name: "b", User: "u",
		Value: map[string]any{"k": "v"}}
	got, err := DecodeCommand(EncodeCommand(c))
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for name, b := range map[string][]byte{
		"version":   {2, '{', '}'},
		"operation": append([]byte{1}, `{"op":9,"vhost":"/","name":"n"}`...),
		"component": append([]byte{1}, `{"op":1,"component":"federation","vhost":"/","name":"n"}`...),
		"field":     append([]byte{1}, `{"op":1,"vhost":"/","name":"n","owner":"x"}`...),
	} {
		if _, err := DecodeCommand(b); !IsUnreadable(err) {
			t.Errorf("newer %s: %v, want unreadable", name, err)
		}
	}
	if _, err := DecodeCommand(append([]byte{1}, `{"op":`...)); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("broken: %v", err)
	}
}

// TestParametersAsCommands: with commands on, a shovel declared on one
// manager and deleted on the other is one command each, applied by both
// (definitions and records), and nothing is written through a Store;
// an invalid definition is refused before anything is proposed.
func TestParametersAsCommands(t *testing.T) {
	l := &paramLog{}
	for i := 0; i < 2; i++ {
		st := &memStore{m: map[string][]byte{}}
		m := New(Config{Store: st, Node: "n"})
		m.SetOwner(func(string) (bool, string) { return false, "elsewhere" }) // run nothing here
		m.SetProposer(l)
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		l.ms, l.stores = append(l.ms, m), append(l.stores, st)
	}
	val := map[string]any{"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}
	if _, err := l.ms[0].Put("/", "bad", "guest", map[string]any{"src-uri": "http://x"}); err == nil {
		t.Fatal("an invalid definition was accepted")
	}
	created, err := l.ms[0].Put("/", "s1", "guest", val)
	if err != nil || !created {
		t.Fatalf("put: %v %v", created, err)
	}
	k := recordKey("/", "s1")
	for i, m := range l.ms {
		deadline := time.Now().Add(5 * time.Second)
		for {
			if p, ok := m.Param("/", "s1"); ok && p.Value["dest-queue"] == "b" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("manager %d lacks s1", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if !l.stores[i].has(k) {
			t.Fatalf("store %d lacks s1's record", i)
		}
	}
	if ok, err := l.ms[1].Delete("admin", "/", "s1"); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	for i, m := range l.ms {
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, ok := m.Param("/", "s1"); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("manager %d keeps s1", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if l.stores[i].has(k) || l.stores[i].puts != 0 {
			t.Fatalf("store %d: record %v, %d writes through the Store", i, l.stores[i].has(k), l.stores[i].puts)
		}
	}
	want := []Command{{Op: OpPut, Actor: "guest", VHost: "/", Name: "s1", User: "guest", Value: val}, {Op: OpDelete, Actor: "admin", VHost: "/", Name: "s1"}}
	if len(l.proposed) != 2 {
		t.Fatalf("proposed %+v", l.proposed)
	}
	for i := range want {
		a, _ := json.Marshal(l.proposed[i])
		b, _ := json.Marshal(want[i])
		if string(a) != string(b) {
			t.Fatalf("command %d: %s, want %s", i, a, b)
		}
	}
}
