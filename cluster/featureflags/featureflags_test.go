package featureflags

import (
	"errors"
	"slices"
	"testing"
)

func TestRegistryNamesUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range All() {
		if f.Name == "" || f.Desc == "" || f.Release == "" {
			t.Errorf("flag %+v lacks a name, description or release", f)
		}
		if seen[f.Name] {
			t.Errorf("flag %s twice", f.Name)
		}
		seen[f.Name] = true
		for _, d := range f.DependsOn {
			if _, ok := Lookup(d); !ok {
				t.Errorf("flag %s depends on unknown %s", f.Name, d)
			}
		}
	}
	if f, ok := Lookup(FeatureFlags); !ok || f.Stability == Required {
		t.Fatalf("feature_flags must be a non-required flag: %+v", f)
	}
}

func TestSupportGossip(t *testing.T) {
	v := EncodeSupport(Supported())
	if v != FeatureFlags+","+ShovelOwnerMixed+","+HashExchanges+","+StreamWriters+","+TopologyCommands+","+StreamChunks+","+StreamAMQP10 {
		t.Fatalf("gossiped support = %q, want only the non-required flags", v)
	}
	got := DecodeSupport(map[string]string{GossipKey: v})
	for _, n := range Supported() {
		if !got[n] {
			t.Errorf("decoded support lacks %s", n)
		}
	}
	old := DecodeSupport(map[string]string{"raft": "x"}) // a v0.1.0 node
	if old[FeatureFlags] {
		t.Fatal("a node that gossips no flags must not support feature_flags")
	}
	if !old["meta_entry_v1"] {
		t.Fatal("every node supports the required flags")
	}
}

func TestSetAndReport(t *testing.T) {
	s := NewSet()
	if s.Enabled(FeatureFlags) || !s.Enabled("meta_entry_v1") {
		t.Fatal("a new set has exactly the required flags")
	}
	if err := s.Require(FeatureFlags); !errors.Is(err, ErrDisabled) {
		t.Fatalf("Require = %v", err)
	}
	if got := s.Missing(DecodeSupport(nil)); len(got) != 0 {
		t.Fatalf("an old node misses %v of a new set", got)
	}
	st := Report(s, map[string][]string{FeatureFlags: {"n3"}})
	i := slices.IndexFunc(st, func(x Status) bool { return x.Name == FeatureFlags })
	if st[i].State != StateUnavailable || !slices.Equal(st[i].Missing, []string{"n3"}) {
		t.Fatalf("report = %+v", st[i])
	}
	if got := EnableOrder(s, FeatureFlags); !slices.Equal(got, []string{FeatureFlags}) {
		t.Fatalf("EnableOrder = %v", got)
	}
	if got := EnableOrder(s, ShovelOwnerMixed); !slices.Equal(got, []string{FeatureFlags, ShovelOwnerMixed}) {
		t.Fatalf("EnableOrder(%s) = %v, want feature_flags first", ShovelOwnerMixed, got)
	}
	s.Enable(FeatureFlags)
	if err := s.Require(FeatureFlags); err != nil {
		t.Fatal(err)
	}
	if got := s.Missing(DecodeSupport(nil)); !slices.Equal(got, []string{FeatureFlags}) {
		t.Fatalf("an old node misses %v, want feature_flags", got)
	}
	if got := EnableOrder(s, FeatureFlags); len(got) != 0 {
		t.Fatalf("EnableOrder of an enabled flag = %v", got)
	}
	s.Enable(ShovelOwnerMixed)
	s.Enable(HashExchanges)
	s.Enable(StreamWriters)
	s.Enable(TopologyCommands)
	s.Enable(StreamChunks)
	s.Enable(StreamAMQP10)
	st = Report(s, nil)
	for _, x := range st {
		if x.State != StateEnabled {
			t.Errorf("%s is %s", x.Name, x.State)
		}
	}
	if n, ok := NameOf(RecordKey("x")); !ok || n != "x" || !ReplicatedKey(RecordKey("x")) {
		t.Fatal("record key")
	}
}
