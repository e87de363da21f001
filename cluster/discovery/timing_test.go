package discovery

import (
	"testing"
	"time"
)

func TestPreset(t *testing.T) {
	lan, err := Preset("", 0, 0, 0)
	if err != nil || lan.ProbeInterval != time.Second {
		t.Fatalf("default preset: %v %v", lan.ProbeInterval, err)
	}
	fast, err := Preset(PresetFast, 0, 0, 0)
	if err != nil || fast.ProbeInterval >= lan.ProbeInterval || fast.SuspicionMult > lan.SuspicionMult {
		t.Fatalf("fast preset not faster: %+v %v", fast, err)
	}
	o, err := Preset(PresetLocal, 123*time.Millisecond, 45*time.Millisecond, 7)
	if err != nil || o.ProbeInterval != 123*time.Millisecond || o.ProbeTimeout != 45*time.Millisecond || o.SuspicionMult != 7 {
		t.Fatalf("overrides: %+v %v", o, err)
	}
	if _, err := Preset("slow", 0, 0, 0); err == nil {
		t.Fatal("unknown preset accepted")
	}
	if kr, err := keyring(nil); kr != nil || err != nil {
		t.Fatalf("no keys: %v %v", kr, err)
	}
	if _, err := keyring([][]byte{[]byte("short")}); err == nil {
		t.Fatal("a 5-byte key accepted")
	}
}

// TestGossipKeys: members sharing a key gossip; one with another key (or
// none) cannot join; a key in the keyring is accepted (rotation), and a
// dead member is forgotten (Forget: left), an alive one is not.
func TestGossipKeys(t *testing.T) {
	k1, k2 := make([]byte, 32), make([]byte, 32)
	for i := range k1 {
		k1[i], k2[i] = byte(i), byte(100+i)
	}
	start := func(name string, keys [][]byte, join ...string) *Membership {
		t.Helper()
		port := freePort(t)
		m, err := Start(Config{NodeName: name, BindAddr: "127.0.0.1", BindPort: port, Join: join,
			RetryJoinInterval: time.Hour, Memberlist: fastTimers(), GossipKeys: keys}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Shutdown() })
		return m
	}
	a := start("a", [][]byte{k1})
	seed := a.LocalMember().Addr
	b := start("b", [][]byte{k1, k2}, seed) // sends with k1, accepts k2 too (a rotation under way)
	waitStatus(t, a, "b", StatusAlive, 5*time.Second)
	_ = b
	start("c", [][]byte{k2}, seed) // a does not accept k2
	start("d", nil, seed)          // plaintext
	time.Sleep(time.Second)
	for _, m := range a.Members() {
		if m.Name == "c" || m.Name == "d" {
			t.Fatalf("a lists %s, whose gossip it cannot decrypt", m.Name)
		}
	}
	if err := a.Forget("b"); err == nil {
		t.Fatal("an alive member was forgotten")
	}
	_ = b.Shutdown() // dies without leaving
	waitStatus(t, a, "b", StatusDead, 10*time.Second)
	if err := a.Forget("b"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, a, "b", StatusLeft, time.Second)
}
