package mqtt

import (
	"slices"
	"testing"
	"time"
)

// TestSweepOrphans: the sessions of a node that is down are due at their
// Off plus their expiry, or (Off 0) from when the node was first seen
// down; only the first live node in name order that runs MQTT expires
// them, each once; a node that comes back is no longer down; sessions
// that never expire are indexed (listed, found, deleted) but never due.
func TestSweepOrphans(t *testing.T) {
	live := []LiveNode{{Name: "a0"}, {Name: "b", MQTT: true}, {Name: "c", MQTT: true}}
	srv := func(name string) *Server {
		return &Server{cfg: Config{NodeName: name, LiveNodes: func() []LiveNode { return live }}, orphans: newOrphans()}
	}
	b, c := srv("b"), srv("c")
	t0 := time.Unix(1_000_000, 0)
	for _, s := range []*Server{b, c} {
		s.indexRecord("/\x00on", &sessionRecord{Node: "a", Gen: 1, Expiry: 10})
		s.indexRecord("/\x00off", &sessionRecord{Node: "a", Gen: 1, Expiry: 10, Off: t0.Add(-8 * time.Second).UnixMilli()})
		s.indexRecord("/\x00never", &sessionRecord{Node: "a", Gen: 1, Expiry: expiryNever})
		s.indexRecord("/\x00mine", &sessionRecord{Node: s.cfg.NodeName, Gen: 1, Expiry: 1})
	}
	if n := len(b.orphans.recs); n != 3 {
		t.Fatalf("%d records indexed, want 3 (not its own)", n)
	}
	step := func(s *Server, at time.Duration, want ...string) {
		t.Helper()
		got := s.sweepOrphans(t0.Add(at))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s at +%s: due %q, want %q", s.cfg.NodeName, at, got, want)
		}
	}
	step(b, 0)
	step(c, 0)
	step(b, time.Second)
	step(b, 2*time.Second, "/\x00off")
	step(b, 3*time.Second) // running: not again
	step(b, 9*time.Second)
	step(b, 10*time.Second, "/\x00on")
	step(c, 20*time.Second) // not the expirer
	step(b, time.Hour)      // the one that never expires: never due
	if b.orphans.recs["/\x00never"] == nil {
		t.Fatal("the session that never expires is not indexed")
	}

	// Node a back: nothing due, and its down time forgotten.
	live = append(live, LiveNode{Name: "a", MQTT: true})
	c.indexRecord("/\x00on", &sessionRecord{Node: "a", Gen: 2, Expiry: 10})
	step(c, 30*time.Second)
	if len(c.orphans.downSince) != 0 {
		t.Fatalf("down times kept for a live node: %v", c.orphans.downSince)
	}
	// A record deleted leaves the index.
	c.indexRecord("/\x00on", nil)
	if c.orphans.recs["/\x00on"] != nil {
		t.Fatal("deleted record still indexed")
	}
}
