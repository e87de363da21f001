package conf

import (
	"strings"
	"testing"
	"time"
)

// TestClusterDiscoveryLoad: cluster.discovery loads from YAML and flags.
func TestClusterDiscoveryLoad(t *testing.T) {
	file := writeFile(t, "cluster:\n  gossip_listen: 127.0.0.1:25672\n  bootstrap_expect: 3\n  discovery:\n"+
		"    dns_name: trident.default.svc.cluster.local\n    port: 4369\n    dns_server: 10.96.0.10:53\n"+
		"    interval: 1s\n    settled_interval: 1m\n")
	c, err := Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := ClusterDiscovery{DNSName: "trident.default.svc.cluster.local", Port: 4369, DNSServer: "10.96.0.10:53",
		Interval: time.Second, SettledInterval: time.Minute}
	if c.Cluster.Discovery != want || !c.Cluster.Discovery.Enabled() {
		t.Fatalf("from file: %+v", c.Cluster.Discovery)
	}
	c, err = Load([]string{"--cluster-gossip-listen", "127.0.0.1:25672",
		"--cluster-discovery-srv", "_gossip._tcp.trident.default.svc.cluster.local."}, nil)
	if err != nil || c.Cluster.Discovery.SRV != "_gossip._tcp.trident.default.svc.cluster.local." {
		t.Fatalf("from flags: %+v %v", c.Cluster.Discovery, err)
	}
	if c, err = Load(nil, nil); err != nil || c.Cluster.Discovery.Enabled() {
		t.Fatalf("default: %+v %v", c.Cluster.Discovery, err)
	}
}

// TestClusterDiscoveryValidate: each bad setting is refused with its key.
func TestClusterDiscoveryValidate(t *testing.T) {
	cases := []struct {
		name    string
		gossip  string
		d       ClusterDiscovery
		wantKey string
	}{
		{"clustering off", "", ClusterDiscovery{DNSName: "a.example"}, "cluster.discovery: needs cluster.gossip_listen"},
		{"both names", "127.0.0.1:25672", ClusterDiscovery{DNSName: "a.example", SRV: "_g._tcp.a.example"}, "cluster.discovery.srv:"},
		{"bad name", "127.0.0.1:25672", ClusterDiscovery{DNSName: "a..example"}, "cluster.discovery.dns_name:"},
		{"name with a space", "127.0.0.1:25672", ClusterDiscovery{SRV: "a b.example"}, "cluster.discovery.srv:"},
		{"long label", "127.0.0.1:25672", ClusterDiscovery{DNSName: strings.Repeat("a", 64) + ".example"}, "cluster.discovery.dns_name:"},
		{"port", "127.0.0.1:25672", ClusterDiscovery{DNSName: "a.example", Port: 70000}, "cluster.discovery.port:"},
		{"port with SRV", "127.0.0.1:25672", ClusterDiscovery{SRV: "_g._tcp.a.example", Port: 25672}, "cluster.discovery.port:"},
		{"server without port", "127.0.0.1:25672", ClusterDiscovery{DNSName: "a.example", DNSServer: "10.0.0.1"}, "cluster.discovery.dns_server:"},
		{"server port 0", "127.0.0.1:25672", ClusterDiscovery{DNSName: "a.example", DNSServer: "10.0.0.1:0"}, "cluster.discovery.dns_server:"},
		{"interval", "127.0.0.1:25672", ClusterDiscovery{DNSName: "a.example", Interval: -time.Second}, "cluster.discovery.interval:"},
		{"settled interval", "127.0.0.1:25672", ClusterDiscovery{DNSName: "a.example", SettledInterval: -time.Second}, "cluster.discovery.settled_interval:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Cluster.GossipListen = tc.gossip
			c.Cluster.Discovery = tc.d
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.wantKey) {
				t.Fatalf("err = %v, want one naming %q", err, tc.wantKey)
			}
		})
	}
	c := Default()
	c.Cluster.GossipListen = "127.0.0.1:25672"
	c.Cluster.Discovery = ClusterDiscovery{SRV: "_gossip._tcp.trident.default.svc.cluster.local.", DNSServer: "[::1]:53"}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid discovery refused: %v", err)
	}
}
