package discovery

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/trident-broker/trident/cluster/discovery/dnstest"
)

// TestDNSResolverSeeds resolves A/AAAA and SRV names against a real DNS
// server whose answers change between lookups.
func TestDNSResolverSeeds(t *testing.T) {
	srv := dnstest.New(t)
	ctx := context.Background()
	seeds := func(c DNSConfig, port int) ([]string, error) {
		c.Server = srv.Addr
		return NewDNSResolver(c).Seeds(ctx, port)
	}
	cases := []struct {
		name  string
		setup func()
		cfg   DNSConfig
		port  int
		want  []string
		fail  bool
	}{
		{"nxdomain", func() {}, DNSConfig{Name: "nodes.trident.test"}, 7000, nil, true},
		{"name without addresses", func() { srv.SetAddrs("nodes.trident.test") },
			DNSConfig{Name: "nodes.trident.test"}, 7000, nil, true},
		{"A and AAAA with the node's port", func() { srv.SetAddrs("nodes.trident.test", "127.0.0.3", "127.0.0.2", "::1") },
			DNSConfig{Name: "nodes.trident.test"}, 7000, []string{"127.0.0.2:7000", "127.0.0.3:7000", "[::1]:7000"}, false},
		{"answers changed", func() { srv.SetAddrs("nodes.trident.test", "127.0.0.4") },
			DNSConfig{Name: "nodes.trident.test."}, 7000, []string{"127.0.0.4:7000"}, false},
		{"configured port", func() {}, DNSConfig{Name: "nodes.trident.test", Port: 4369}, 7000, []string{"127.0.0.4:4369"}, false},
		{"SRV targets and ports", func() {
			srv.SetAddrs("a.trident.test", "127.0.0.5")
			srv.SetAddrs("b.trident.test", "127.0.0.6", "127.0.0.7")
			srv.SetSRV("_gossip._tcp.trident.test", dnstest.SRV{Target: "a.trident.test", Port: 25672},
				dnstest.SRV{Target: "b.trident.test", Port: 25680})
		}, DNSConfig{SRV: "_gossip._tcp.trident.test"}, 7000,
			[]string{"127.0.0.5:25672", "127.0.0.6:25680", "127.0.0.7:25680"}, false},
		{"SRV target without address left out", func() {
			srv.SetSRV("_gossip._tcp.trident.test", dnstest.SRV{Target: "a.trident.test", Port: 25672},
				dnstest.SRV{Target: "gone.trident.test", Port: 25672})
		}, DNSConfig{SRV: "_gossip._tcp.trident.test"}, 7000, []string{"127.0.0.5:25672"}, false},
		{"SRV with no target resolving", func() {
			srv.SetSRV("_gossip._tcp.trident.test", dnstest.SRV{Target: "gone.trident.test", Port: 25672})
		}, DNSConfig{SRV: "_gossip._tcp.trident.test"}, 7000, nil, true},
		{"SRV removed", func() { srv.Remove("_gossip._tcp.trident.test") },
			DNSConfig{SRV: "_gossip._tcp.trident.test"}, 7000, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			got, err := seeds(tc.cfg, tc.port)
			if tc.fail != (err != nil) {
				t.Fatalf("err = %v, want failure %v", err, tc.fail)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("seeds = %v, want %v", got, tc.want)
			}
		})
	}
	var de *net.DNSError
	if _, err := seeds(DNSConfig{Name: "missing.trident.test"}, 1); !errors.As(err, &de) || !de.IsNotFound {
		t.Errorf("NXDOMAIN: err %v, want a not-found DNSError", err)
	}
}

// TestSeedCandidates: the node's own address and alive members are not
// joined; static and discovered seeds are merged.
func TestSeedCandidates(t *testing.T) {
	self := map[string]bool{"10.0.0.1:25672": true}
	alive := map[string]bool{"10.0.0.2:25672": true}
	got := seedCandidates([]string{"seed.example:25672", "10.0.0.3:25672", "10.0.0.1:25672", "10.0.0.2:25672", "10.0.0.3:25672"}, self, alive)
	want := []string{"10.0.0.3:25672", "seed.example:25672"}
	if !slices.Equal(got, want) {
		t.Fatalf("candidates %v, want %v", got, want)
	}
}

func startDNSNode(t *testing.T, name, ip string, port int, dc DNSConfig) *Membership {
	t.Helper()
	m, err := Start(Config{NodeName: name, BindAddr: ip, BindPort: port, DNS: dc,
		RetryJoinInterval: 200 * time.Millisecond, Memberlist: fastTimers()}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

func waitRounds(t *testing.T, m *Membership, n int) seedState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	start := m.seeds.snapshot().rounds
	for {
		st := m.seeds.snapshot()
		if st.rounds >= start+n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d DNS rounds in 10s, want %d", m.Name(), st.rounds-start, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func aliveNames(m *Membership) []string {
	var out []string
	for _, mb := range m.Members() {
		if mb.Status == StatusAlive {
			out = append(out, mb.Name)
		}
	}
	return out
}

// TestDNSDiscoveryForms: three nodes on 127.0.0.2-4, one gossip port,
// find each other only through a name's A records: while the name is
// NXDOMAIN they keep asking, and as addresses are added they join; none
// ever joins its own address.
func TestDNSDiscoveryForms(t *testing.T) {
	srv := dnstest.New(t)
	port := freePort(t)
	dc := DNSConfig{Name: "nodes.trident.test", Server: srv.Addr, Interval: 50 * time.Millisecond,
		SettledInterval: 200 * time.Millisecond, Expect: 3}
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	var ms []*Membership
	for i, ip := range ips {
		ms = append(ms, startDNSNode(t, "node"+strconv.Itoa(i), ip, port, dc))
	}
	for _, m := range ms {
		st := waitRounds(t, m, 3)
		if st.err == nil || len(st.tried) != 0 {
			t.Fatalf("%s with NXDOMAIN: %+v", m.Name(), st)
		}
	}
	// Only node0 in DNS: node0 tries nobody (itself left out), the
	// others join it.
	srv.SetAddrs("nodes.trident.test", ips[0])
	for _, m := range ms[1:] {
		waitStatus(t, m, "node0", StatusAlive, 10*time.Second)
	}
	st := waitRounds(t, ms[0], 2)
	if !slices.Equal(st.resolved, []string{net.JoinHostPort(ips[0], strconv.Itoa(port))}) || len(st.tried) != 0 || st.err != nil {
		t.Fatalf("node0 resolving only itself: %+v", st)
	}
	// All three: everyone sees everyone, and what each tries is never
	// itself.
	srv.SetAddrs("nodes.trident.test", ips...)
	for _, m := range ms {
		for i := range ms {
			waitStatus(t, m, "node"+strconv.Itoa(i), StatusAlive, 10*time.Second)
		}
	}
	for i, m := range ms {
		st := waitRounds(t, m, 1)
		if len(st.resolved) != 3 {
			t.Errorf("%s resolved %v", m.Name(), st.resolved)
		}
		if slices.Contains(st.tried, net.JoinHostPort(ips[i], strconv.Itoa(port))) {
			t.Errorf("%s tried its own address: %v", m.Name(), st.tried)
		}
	}
}

// TestDNSDiscoverySelfOnly: a node alone in its SRV records never joins
// itself, however many rounds run.
func TestDNSDiscoverySelfOnly(t *testing.T) {
	srv := dnstest.New(t)
	port := freePort(t)
	srv.SetAddrs("self.trident.test", "127.0.0.1")
	srv.SetSRV("_gossip._tcp.trident.test", dnstest.SRV{Target: "self.trident.test", Port: uint16(port)})
	m := startDNSNode(t, "alone", "127.0.0.1", port, DNSConfig{SRV: "_gossip._tcp.trident.test", Server: srv.Addr,
		Interval: 20 * time.Millisecond, Expect: 3})
	st := waitRounds(t, m, 5)
	if st.err != nil || len(st.resolved) != 1 || len(st.tried) != 0 {
		t.Fatalf("alone: %+v", st)
	}
}

// TestDNSDiscoverySettled: once formed, a node keeps resolving at the
// settled rate, so a member that comes back at a new address (and joins
// no one itself) is found through DNS; static seeds are joined too.
func TestDNSDiscoverySettled(t *testing.T) {
	srv := dnstest.New(t)
	const name = "_gossip._tcp.trident.test"
	srv.SetAddrs("a.trident.test", "127.0.0.1")
	srv.SetAddrs("b.trident.test", "127.0.0.1")
	pa, pb := freePort(t), freePort(t)
	srv.SetSRV(name, dnstest.SRV{Target: "a.trident.test", Port: uint16(pa)}, dnstest.SRV{Target: "b.trident.test", Port: uint16(pb)})
	dc := DNSConfig{SRV: name, Server: srv.Addr, Interval: 50 * time.Millisecond, SettledInterval: 300 * time.Millisecond, Expect: 2}
	a := startDNSNode(t, "a", "127.0.0.1", pa, dc)
	b := startDNSNode(t, "b", "127.0.0.1", pb, dc)
	waitStatus(t, a, "b", StatusAlive, 10*time.Second)
	waitStatus(t, b, "a", StatusAlive, 10*time.Second)

	// b crashes; c, a node without discovery nor seeds, comes up on a
	// new port, and DNS now lists it instead of b.
	b.Shutdown()
	waitStatus(t, a, "b", StatusDead, 10*time.Second)
	pc := freePort(t)
	c := startDNSNode(t, "c", "127.0.0.1", pc, DNSConfig{})
	srv.SetSRV(name, dnstest.SRV{Target: "a.trident.test", Port: uint16(pa)}, dnstest.SRV{Target: "b.trident.test", Port: uint16(pc)})
	waitStatus(t, a, "c", StatusAlive, 10*time.Second)
	waitStatus(t, c, "a", StatusAlive, 10*time.Second)

	// A static seed is joined along with DNS's.
	pd := freePort(t)
	d := startDNSNode(t, "d", "127.0.0.1", pd, DNSConfig{})
	e, err := Start(Config{NodeName: "e", BindAddr: "127.0.0.1", BindPort: freePort(t), DNS: DNSConfig{Name: "missing.trident.test", Server: srv.Addr, Interval: 50 * time.Millisecond},
		Join: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(pd))}, Memberlist: fastTimers()}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	waitStatus(t, d, "e", StatusAlive, 10*time.Second)
	if st := e.seeds.snapshot(); st.rounds == 0 || st.err == nil || !slices.Equal(st.tried, e.seeds.static) {
		t.Errorf("e: missing name resolved: %+v", st)
	}
}
