package exchange

import (
	"slices"
	"testing"
)

// TestSuperStreamLookups: a super stream declared by DeclareSuperStream
// lists its partitions in x-stream-partition-order, routes a key to the
// partition bound with it, and each partition knows its index; a
// direct exchange without x-super-stream bound the same way is none.
func TestSuperStreamLookups(t *testing.T) {
	v, _ := newTestVHost(t)
	a := namedAuthorizer{name: "alice"}
	streams, keys := SuperStreamPartitions("inv", 0, []string{"eu", "us", "apac"})
	if err := v.DeclareSuperStream(a, "inv", streams, keys, nil); err != nil {
		t.Fatal(err)
	}
	got, ok := v.Partitions("inv")
	if want := []string{"inv-eu", "inv-us", "inv-apac"}; !ok || !slices.Equal(got, want) {
		t.Fatalf("Partitions = %v %v, want %v", got, ok, want)
	}
	if r, ok := v.Route("inv", "apac"); !ok || !slices.Equal(r, []string{"inv-apac"}) {
		t.Fatalf("Route(apac) = %v %v", r, ok)
	}
	if r, ok := v.Route("inv", "none"); !ok || len(r) != 0 {
		t.Fatalf("Route(none) = %v %v", r, ok)
	}
	for i, s := range streams {
		if sup, idx, ok := v.PartitionOf(s); !ok || sup != "inv" || idx != i {
			t.Errorf("PartitionOf(%s) = %q %d %v, want inv %d", s, sup, idx, ok, i)
		}
	}
	if err := v.DeclareSuperStream(a, "inv", streams, keys, nil); err != ErrSuperStreamExists {
		t.Fatalf("declared twice: %v", err)
	}
	// Declared by hand (as over the HTTP API), orders given out of name order.
	declareX(t, v, "plain", KindDirect, ExchangeOpts{Durable: true})
	declareX(t, v, "byhand", KindDirect, ExchangeOpts{Durable: true, Args: Table{ArgSuperStream: true}})
	for i, s := range []string{"h-b", "h-a"} {
		newStreamQ(t, v, s, nil)
		bindQ(t, v, s, "byhand", s, Table{ArgPartitionOrder: float64(i)})
		bindQ(t, v, s, "plain", s, nil)
	}
	if got, ok := v.Partitions("byhand"); !ok || !slices.Equal(got, []string{"h-b", "h-a"}) {
		t.Fatalf("Partitions(byhand) = %v %v", got, ok)
	}
	if _, ok := v.Partitions("plain"); ok {
		t.Fatal("a direct exchange without x-super-stream is a super stream")
	}
	if sup, idx, ok := v.PartitionOf("h-a"); !ok || sup != "byhand" || idx != 1 {
		t.Fatalf("PartitionOf(h-a) = %q %d %v", sup, idx, ok)
	}
	parts, err := v.DeleteSuperStream(a, "inv")
	if err != nil || len(parts) != 3 {
		t.Fatalf("DeleteSuperStream = %v %v", parts, err)
	}
	if _, ok := v.Exchange("inv"); ok {
		t.Fatal("exchange left")
	}
	for _, s := range streams {
		if _, err := v.Queue(s, nil); err == nil {
			t.Fatalf("partition %s left", s)
		}
	}
	if _, err := v.DeleteSuperStream(a, "plain"); err != ErrNotSuperStream {
		t.Fatalf("delete of a plain exchange: %v", err)
	}
}

// flakyAuthz allows everything but the second write check on one name:
// DeclareSuperStream's first pass passes, the bind's own check fails.
type flakyAuthz struct {
	namedAuthorizer
	name string
	n    int
}

func (f *flakyAuthz) CheckWrite(vhost, kind, name string) error {
	if name == f.name {
		if f.n++; f.n == 2 {
			return errorf(KindAccessRefused, "no")
		}
	}
	return nil
}

// TestSuperStreamUndo: a declaration that fails part way deletes the
// exchange and the streams it created, and only those.
func TestSuperStreamUndo(t *testing.T) {
	v, _ := newTestVHost(t)
	a := &flakyAuthz{namedAuthorizer: namedAuthorizer{name: "alice"}, name: "u-1"}
	streams, keys := SuperStreamPartitions("u", 2, nil)
	if err := v.DeclareSuperStream(a, "u", streams, keys, nil); KindOf(err) != KindAccessRefused {
		t.Fatalf("declare: %v", err)
	}
	if _, ok := v.Exchange("u"); ok {
		t.Fatal("exchange left after a failed declaration")
	}
	for _, s := range streams {
		if _, err := v.Queue(s, nil); err == nil {
			t.Fatalf("%s left after a failed declaration", s)
		}
	}
}
