package exchange

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

var updateTopology = flag.Bool("update-topology", false, "rewrite testdata/topology from EncodeTopology")

// goldenTopology are the commands whose version 1 encodings are in
// testdata/topology: they are written into the metadata log of a cluster,
// so a later release must read them as they are.
func goldenTopology() map[string]TopologyCommand {
	return map[string]TopologyCommand{
		"declare-exchange": {Op: TopoDeclareExchange, VHost: "/", Actor: "alice", Name: "orders", Type: KindTopic,
			Durable: true, AutoDelete: true, Internal: true, Args: Table{"alternate-exchange": "ae"}},
		"delete-exchange": {Op: TopoDeleteExchange, VHost: "prod", Actor: "bob", Name: "orders", IfUnused: true},
		"declare-queue": {Op: TopoDeclareQueue, VHost: "/", Actor: "alice", Name: "q1", Durable: true,
			Exclusive: true, AutoDelete: true, Args: Table{"x-queue-type": "quorum", "x-max-length": int64(10),
				"x-dead-letter-exchange": "dlx"}},
		"delete-queue": {Op: TopoDeleteQueue, VHost: "/", Name: "q1", IfUnused: true, IfEmpty: true},
		"declare-quorum-queue": {Op: TopoDeclareQueue, VHost: "/", Actor: "dave", Name: "qq", Durable: true,
			Args: Table{"x-queue-type": "quorum"}, ID: 1<<61 | 12345, Node: "n1", Members: []string{"n1", "n2", "n3"}},
		"bind-queue": {Op: TopoBind, VHost: "/", Actor: "carol", Name: "q1", ToQueue: true, Source: "amq.topic",
			Key: "a.*.b", Args: Table{"x-match": "any"}},
		"unbind-exchange": {Op: TopoUnbind, VHost: "v", Actor: "carol", Name: "dst", Source: "src", Key: "k"},
		"set-policy": {Op: TopoSetPolicy, VHost: "/", Actor: "admin", Name: "ttl", Pattern: "^q\\.", ApplyTo: ApplyToQueues,
			Priority: 5, Definition: Table{"message-ttl": int64(1000)}},
		"delete-policy": {Op: TopoDeletePolicy, VHost: "/", Actor: "admin", Name: "ttl"},
		"declare-vhost": {Op: TopoDeclareVHost, VHost: "prod", Actor: "admin"},
		"set-vhost-metadata": {Op: TopoSetVHostMeta, VHost: "prod", Actor: "admin", Description: "production",
			Tags: []string{"eu", "critical"}},
		"delete-vhost": {Op: TopoDeleteVHost, VHost: "prod", Actor: "admin"},
		"set-operator-policy": {Op: TopoSetOperatorPolicy, VHost: "/", Actor: "admin", Name: "cap", Pattern: ".*",
			ApplyTo: ApplyToQueues, Priority: 1, Definition: Table{"max-length": int64(1000)}},
		"delete-operator-policy": {Op: TopoDeleteOperatorPolicy, VHost: "/", Actor: "admin", Name: "cap"},
	}
}

func TestTopologyGolden(t *testing.T) {
	for name, c := range goldenTopology() {
		path := filepath.Join("testdata", "topology", "v1-"+name+".bin")
		enc := EncodeTopology(c)
		if *updateTopology {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, enc, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, old) {
			t.Errorf("%s: encoding differs from the golden one\n got % x\nwant % x", name, enc, old)
		}
		got, err := DecodeTopology(old)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("%s: decoded %+v\nwant %+v", name, got, c)
		}
	}
}

func TestTopologyDecodeRefuses(t *testing.T) {
	good := EncodeTopology(TopologyCommand{Op: TopoDeclareQueue, VHost: "/", Name: "q"})
	withField := func(k string, v any) []byte {
		t := Table{"vhost": "/", k: v}
		return append([]byte{topologyVersion, byte(TopoDeclareQueue)}, encodeRecord(t)...)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"newer version", append([]byte{topologyVersion + 1}, good[1:]...), ErrTopologyUnreadable},
		{"unknown op", append([]byte{topologyVersion, 200}, good[2:]...), ErrTopologyUnreadable},
		{"unknown field", withField("partition", "p1"), ErrTopologyUnreadable},
		{"wrong type", withField("durable", "yes"), ErrBadTopology},
		{"args not a table", withField("args", "x"), ErrBadTopology},
		{"empty", nil, ErrBadTopology},
		{"version 0", append([]byte{0}, good[1:]...), ErrBadTopology},
		{"truncated", good[:len(good)-1], ErrBadTopology},
	} {
		if _, err := DecodeTopology(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

// batchStore is a fakeStore with MetaBatcher, counting how records reach it.
type batchStore struct {
	*fakeStore
	mu      sync.Mutex
	batches [][]string
	fail    error
}

func (s *batchStore) WriteMetaBatch(keys []string, vals [][]byte) error {
	s.mu.Lock()
	fail := s.fail
	if fail == nil {
		s.batches = append(s.batches, append([]string(nil), keys...))
	}
	s.mu.Unlock()
	if fail != nil {
		return fail
	}
	for i, k := range keys {
		if vals[i] == nil {
			_ = s.fakeStore.DeleteMeta(k)
		} else {
			_ = s.fakeStore.PutMeta(k, vals[i])
		}
	}
	return nil
}

func (s *batchStore) keysWith(prefix string) []string {
	s.fakeStore.Mu.Lock()
	defer s.fakeStore.Mu.Unlock()
	var out []string
	for k := range s.fakeStore.Meta {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// A command's records reach the store in one batch: deleting an exchange
// deletes its record and its bindings' together, so a crash cannot leave
// bindings naming an exchange that is gone, or the other way round.
func TestApplyWritesOneBatch(t *testing.T) {
	st := &batchStore{fakeStore: newFakeStore()}
	b := newTestBroker(t, st)
	v := mustVHost(t, b, "/")
	must := func(_ Result, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(v.Apply(TopologyCommand{Op: TopoDeclareExchange, Name: "x", Type: KindDirect, Durable: true}))
	for _, q := range []string{"q1", "q2"} {
		must(v.Apply(TopologyCommand{Op: TopoDeclareQueue, Name: q, Durable: true}))
		must(v.Apply(TopologyCommand{Op: TopoBind, Name: q, ToQueue: true, Source: "x", Key: "k"}))
	}
	if n := len(st.keysWith("binding/")); n != 2 {
		t.Fatalf("%d binding records, want 2", n)
	}
	st.mu.Lock()
	st.batches = nil
	st.fail = errors.New("disk full")
	st.mu.Unlock()
	if _, err := v.Apply(TopologyCommand{Op: TopoDeleteExchange, Name: "x"}); err == nil {
		t.Fatal("delete with a failing store: no error")
	}
	if n, xs := len(st.keysWith("binding/")), st.keysWith("exchange/"); n != 2 || len(xs) != 1 {
		t.Fatalf("a failed batch left %d binding records and exchange records %q: want all of them", n, xs)
	}
	st.mu.Lock()
	st.fail = nil
	st.mu.Unlock()
	// The failed delete changed memory (standalone: memory first); the
	// records are removed by deleting again what remains: the queues.
	must(v.Apply(TopologyCommand{Op: TopoDeclareExchange, Name: "y", Type: KindDirect, Durable: true}))
	for _, q := range []string{"q1", "q2"} {
		must(v.Apply(TopologyCommand{Op: TopoBind, Name: q, ToQueue: true, Source: "y", Key: "k"}))
	}
	st.mu.Lock()
	st.batches = nil
	st.mu.Unlock()
	must(v.Apply(TopologyCommand{Op: TopoDeleteExchange, Name: "y"}))
	st.mu.Lock()
	batches := st.batches
	st.mu.Unlock()
	if len(batches) != 1 || len(batches[0]) != 3 {
		t.Fatalf("delete of an exchange with 2 bindings wrote batches %q, want one of 3 records", batches)
	}
	for _, k := range st.keysWith("binding/") {
		if strings.Contains(k, "\x00y\x00") {
			t.Fatalf("binding record %q left", k)
		}
	}
}

// VHost.Do applies the command for the user it authorized, and the
// command carries that user.
func TestDoAppliesCommandWithActor(t *testing.T) {
	v, _ := newTestVHost(t)
	var seen []TopologyCommand
	v.b.onApply = func(c TopologyCommand) { seen = append(seen, c) }
	a := namedAuthorizer{name: "alice"}
	if _, err := v.Do(a, QueueDeclare{Name: "q", Opts: QueueOpts{Durable: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Do(a, QueueBind{Queue: "q", Exchange: "amq.direct", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0].Op != TopoDeclareQueue || seen[1].Op != TopoBind {
		t.Fatalf("applied %+v", seen)
	}
	for _, c := range seen {
		if c.Actor != "alice" || c.VHost != "/" {
			t.Fatalf("command %v: actor %q vhost %q", c.Op, c.Actor, c.VHost)
		}
	}
}

type namedAuthorizer struct{ name string }

func (namedAuthorizer) CheckConfigure(vhost, kind, name string) error { return nil }
func (namedAuthorizer) CheckWrite(vhost, kind, name string) error     { return nil }
func (namedAuthorizer) CheckRead(vhost, kind, name string) error      { return nil }
func (a namedAuthorizer) Name() string                                { return a.name }
