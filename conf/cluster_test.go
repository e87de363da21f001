package conf

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestClusterDefaults: clustering is off by default and the node name is
// trident@<hostname>.
func TestClusterDefaults(t *testing.T) {
	c := Default()
	h, _ := os.Hostname()
	if c.Cluster.Enabled() || c.Cluster.GossipListen != "" || len(c.Cluster.Join) != 0 || c.Cluster.AdvertiseAddr != "" {
		t.Fatalf("clustering on by default: %+v", c.Cluster)
	}
	if h != "" && c.Cluster.NodeName != "trident@"+h {
		t.Fatalf("node_name = %q, want trident@%s", c.Cluster.NodeName, h)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestClusterLoad: the cluster section loads from YAML, env and flags,
// and --join is an alias of --cluster-join.
func TestClusterLoad(t *testing.T) {
	file := writeFile(t, "cluster:\n  node_name: a@h\n  gossip_listen: 127.0.0.1:25672\n  advertise_addr: 10.0.0.1\n  join: [\"10.0.0.2:25672\", \"h3:25672\"]\n")
	c, err := Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Cluster{NodeName: "a@h", GossipListen: "127.0.0.1:25672", AdvertiseAddr: "10.0.0.1", Join: []string{"10.0.0.2:25672", "h3:25672"}}
	if !reflect.DeepEqual(c.Cluster, want) || !c.Cluster.Enabled() {
		t.Fatalf("from file: %+v", c.Cluster)
	}
	c, err = Load(nil, envMap(map[string]string{
		"TRIDENT_CLUSTER_NODE_NAME": "b@h", "TRIDENT_CLUSTER_GOSSIP_LISTEN": ":25672", "TRIDENT_CLUSTER_JOIN": "h1:1,h2:2"}))
	if err != nil || c.Cluster.NodeName != "b@h" || c.Cluster.GossipListen != ":25672" || !reflect.DeepEqual(c.Cluster.Join, []string{"h1:1", "h2:2"}) {
		t.Fatalf("from env: %+v %v", c.Cluster, err)
	}
	for _, flag := range []string{"--join", "--cluster-join"} {
		c, err = Load([]string{"--cluster-gossip-listen", "127.0.0.1:25700", flag, "127.0.0.1:25701, 127.0.0.1:25702",
			"--cluster-node-name", "c@h", "--cluster-advertise-addr", "127.0.0.2:26000"}, nil)
		if err != nil {
			t.Fatalf("%s: %v", flag, err)
		}
		if !reflect.DeepEqual(c.Cluster.Join, []string{"127.0.0.1:25701", "127.0.0.1:25702"}) || c.Cluster.NodeName != "c@h" ||
			c.Cluster.AdvertiseAddr != "127.0.0.2:26000" {
			t.Fatalf("%s: %+v", flag, c.Cluster)
		}
	}
	// The flag wins over the file.
	c, err = Load([]string{"--config", file, "--join", "h9:9"}, nil)
	if err != nil || !reflect.DeepEqual(c.Cluster.Join, []string{"h9:9"}) {
		t.Fatalf("flag over file: %+v %v", c.Cluster, err)
	}
	var b strings.Builder
	Usage(&b)
	for _, s := range []string{"--cluster-gossip-listen", "TRIDENT_CLUSTER_JOIN", "cluster.node_name"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("usage lacks %s", s)
		}
	}
}

// TestClusterValidate: each bad cluster setting is reported by key.
func TestClusterValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Cluster)
		want string // "" = valid
	}{
		{"on", func(c *Cluster) { c.GossipListen = "127.0.0.1:25672"; c.Join = []string{"127.0.0.1:25673"} }, ""},
		{"wildcard", func(c *Cluster) { c.GossipListen = ":25672" }, ""},
		{"advertise ip", func(c *Cluster) { c.GossipListen = ":25672"; c.AdvertiseAddr = "10.1.2.3" }, ""},
		{"advertise ip:port", func(c *Cluster) { c.GossipListen = ":25672"; c.AdvertiseAddr = "[::1]:25680" }, ""},
		{"empty name", func(c *Cluster) { c.NodeName = "" }, "cluster.node_name: must not be empty"},
		{"join without gossip", func(c *Cluster) { c.Join = []string{"h:1"} }, "cluster.join: needs cluster.gossip_listen"},
		{"advertise without gossip", func(c *Cluster) { c.AdvertiseAddr = "10.0.0.1" }, "cluster.advertise_addr: needs cluster.gossip_listen"},
		{"no port", func(c *Cluster) { c.GossipListen = "127.0.0.1" }, "cluster.gossip_listen: \"127.0.0.1\": missing port"},
		{"hostname", func(c *Cluster) { c.GossipListen = "localhost:25672" }, "is not an IP address"},
		{"port 0", func(c *Cluster) { c.GossipListen = "127.0.0.1:0" }, "port 0"},
		{"amqp port", func(c *Cluster) { c.GossipListen = ":5672" }, "port 5672 is also used by amqp.listen"},
		{"bad advertise", func(c *Cluster) { c.GossipListen = ":25672"; c.AdvertiseAddr = "example.com" }, "cluster.advertise_addr: \"example.com\""},
		{"bad join", func(c *Cluster) { c.GossipListen = ":25672"; c.Join = []string{"ok:1", "nohost"} }, "cluster.join[1]: \"nohost\""},
		{"join without host", func(c *Cluster) { c.GossipListen = ":25672"; c.Join = []string{":25672"} }, "cluster.join[0]: \":25672\": missing host"},
	} {
		c := Default()
		tc.set(&c.Cluster)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := Load([]string{"--join", "h:1"}, nil); err == nil || !strings.Contains(err.Error(), "needs cluster.gossip_listen") {
		t.Errorf("--join alone: %v", err)
	}
	if _, err := Load([]string{"--cluster-gossip-listen", "nope"}, nil); err == nil || !strings.Contains(err.Error(), "cluster.gossip_listen") {
		t.Errorf("bad gossip_listen: %v", err)
	}
}

// TestClusterRaft: raft_listen defaults to the gossip port + 1, the Raft
// settings load from flags and are checked.
func TestClusterRaft(t *testing.T) {
	for _, tc := range []struct{ gossip, raft, want string }{
		{":25672", "", ":25673"},
		{"127.0.0.1:25700", "", "127.0.0.1:25701"},
		{"127.0.0.1:25700", "127.0.0.1:0", "127.0.0.1:0"},
		{"", "", ""},
	} {
		c := Cluster{GossipListen: tc.gossip, RaftListen: tc.raft}
		if got := c.RaftListenAddr(); got != tc.want {
			t.Errorf("RaftListenAddr(%q, %q) = %q, want %q", tc.gossip, tc.raft, got, tc.want)
		}
	}
	c, err := Load([]string{"--cluster-gossip-listen", "127.0.0.1:25700", "--cluster-raft-listen", "127.0.0.1:25710",
		"--cluster-raft-advertise", "node1", "--cluster-bootstrap-expect", "3", "--cluster-cookie", "s3cret",
		"--cluster-fault-injection", "true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cl := c.Cluster; cl.RaftListen != "127.0.0.1:25710" || cl.RaftAdvertise != "node1" || cl.BootstrapExpect != 3 ||
		cl.Cookie != "s3cret" || !cl.FaultInjection {
		t.Fatalf("loaded %+v", cl)
	}
	for _, tc := range []struct {
		name string
		set  func(c *Config)
		want string // "" = valid
	}{
		{"defaults", func(c *Config) {}, ""},
		{"advertise host:port", func(c *Config) { c.Cluster.RaftAdvertise = "10.0.0.1:26000" }, ""},
		{"advertise ipv6", func(c *Config) { c.Cluster.RaftAdvertise = "::1" }, ""},
		{"same port as gossip", func(c *Config) { c.Cluster.RaftListen = ":25700" }, "cluster.raft_listen"},
		{"same port as amqp", func(c *Config) { c.Cluster.RaftListen = ":5672" }, "cluster.raft_listen"},
		{"derived clash", func(c *Config) { c.Cluster.GossipListen = "127.0.0.1:5671" }, "cluster.raft_listen"},
		{"top port", func(c *Config) { c.Cluster.GossipListen = "127.0.0.1:65535" }, "cluster.raft_listen"},
		{"host name", func(c *Config) { c.Cluster.RaftListen = "node1:25800" }, "cluster.raft_listen"},
		{"negative expect", func(c *Config) { c.Cluster.BootstrapExpect = -1 }, "cluster.bootstrap_expect"},
		{"long cookie", func(c *Config) { c.Cluster.Cookie = strings.Repeat("x", 256) }, "cluster.cookie"},
		{"advertise port 0", func(c *Config) { c.Cluster.RaftAdvertise = "h:0" }, "cluster.raft_advertise"},
		{"off with raft_listen", func(c *Config) { c.Cluster.GossipListen, c.Cluster.RaftListen = "", ":25673" }, "cluster.raft_listen"},
		{"off with expect", func(c *Config) { c.Cluster.GossipListen, c.Cluster.BootstrapExpect = "", 3 }, "cluster.bootstrap_expect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Cluster.GossipListen = "127.0.0.1:25700"
			tc.set(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one about %s", err, tc.want)
			}
		})
	}
}

// TestClusterCookieFile: cluster.cookie_file loads from flags, defaults
// to <data_dir>/cluster.cookie, and is exclusive with cluster.cookie; a
// cookie of white space is refused (it would be an empty one).
func TestClusterCookieFile(t *testing.T) {
	base := []string{"--cluster-gossip-listen", "127.0.0.1:25672"}
	c, err := Load(append(base, "--data-dir", "/var/lib/t"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Cluster.CookieFilePath(c.DataDir); got != "/var/lib/t/cluster.cookie" {
		t.Fatalf("default cookie file %q", got)
	}
	c, err = Load(append(base, "--cluster-cookie-file", "/etc/t/cookie"), nil)
	if err != nil || c.Cluster.CookieFilePath(c.DataDir) != "/etc/t/cookie" {
		t.Fatalf("cookie_file: %q %v", c.Cluster.CookieFile, err)
	}
	for _, args := range [][]string{
		{"--cluster-cookie", "x", "--cluster-cookie-file", "/etc/t/cookie"},
		{"--cluster-cookie", "  "},
	} {
		if _, err := Load(append(base, args...), nil); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
