package conf

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cluster configures clustering (issue 7): membership and failure
// detection over gossip (cluster/discovery). Clustering is off while
// GossipListen is empty; the node then runs alone exactly as without this
// section.
type Cluster struct {
	// NodeName is the node's unique name in the cluster, "trident@<host>"
	// by default (RabbitMQ's rabbit@<host>). Nodes on one machine need
	// distinct names. It is also the node name the management API reports.
	NodeName string `yaml:"node_name"`
	// Name is the cluster's name (RabbitMQ's cluster_name) shown by the
	// management API and UI. Empty means the node's name alone, or the
	// first member's name in a cluster. A name set through PUT
	// /api/cluster-name is kept cluster-wide and wins over this one.
	Name string `yaml:"name"`
	// GossipListen is the gossip address (TCP and UDP), IP:port or :port,
	// e.g. "127.0.0.1:25672" or ":25672" (RabbitMQ's inter-node port).
	// Empty disables clustering.
	GossipListen string `yaml:"gossip_listen"`
	// AdvertiseAddr is the address peers reach this node's gossip at: an
	// IP, or IP:port when the port differs from GossipListen's. Empty means
	// GossipListen's address (a private address of the host for 0.0.0.0).
	AdvertiseAddr string `yaml:"advertise_addr"`
	// Join lists host:port gossip addresses of nodes of an existing cluster
	// (flag --join host:port[,host:port]). Seeds that are down are retried
	// in the background; empty founds a new cluster that others may join.
	Join []string `yaml:"join"`

	// RaftListen is where the node's Raft traffic (every Raft group and
	// the metadata RPCs, over one multiplexed listener) binds, IP:port or
	// :port. Empty means gossip_listen's host and gossip port + 1 (so the
	// default pair is 25672/25673). Port 0 picks a free port: peers learn
	// the address from gossip.
	RaftListen string `yaml:"raft_listen"`
	// RaftAdvertise is the address peers reach RaftListen at: host or
	// host:port. Empty means RaftListen's host, or for a wildcard host the
	// host gossip advertises, with the bound port.
	RaftAdvertise string `yaml:"raft_advertise"`
	// BootstrapExpect: with N > 0 a node without cluster state waits until
	// N members are alive and then forms the metadata group with them
	// (start exactly N nodes with the same value). With 0, a node without
	// join seeds or discovery forms a cluster of its own, and a node with
	// them waits to be added by the cluster's leader.
	BootstrapExpect int `yaml:"bootstrap_expect"`
	// Cookie is the cluster's shared secret (RabbitMQ's Erlang cookie):
	// every inter-node connection proves it knows it. Every node must have
	// the same value. Empty means the cookie is read from CookieFile.
	Cookie string `yaml:"cookie"`
	// CookieFile holds the cookie when Cookie is empty: generated (32
	// random bytes, mode 0600) on the first start that finds no file, and
	// read on every later start. Empty means <data_dir>/cluster.cookie
	// (CookieFilePath). Copy the file to every node, or point every node
	// at the same secret. An empty cookie never means "no authentication".
	CookieFile string `yaml:"cookie_file"`
	// FaultInjection enables PUT /api/cluster/partition (administrators
	// only), which cuts this node off from the listed Raft addresses: for
	// partition tests, never in production.
	FaultInjection bool `yaml:"fault_injection"`

	// TLS makes the inter-node (Raft/mux) port mutual TLS; GossipKey and
	// GossipKeyring encrypt gossip; FailureDetection, ProbeInterval,
	// ProbeTimeout and SuspicionMult set memberlist's failure detection
	// (cluster_security.go).
	TLS              ClusterTLS    `yaml:"tls"`
	GossipKey        string        `yaml:"gossip_key"`
	GossipKeyring    []string      `yaml:"gossip_keyring"`
	FailureDetection string        `yaml:"failure_detection"`
	ProbeInterval    time.Duration `yaml:"probe_interval"`
	ProbeTimeout     time.Duration `yaml:"probe_timeout"`
	SuspicionMult    int           `yaml:"suspicion_mult"`

	// Discovery finds seeds in DNS besides Join (cluster_discovery.go).
	Discovery ClusterDiscovery `yaml:"discovery"`
}

// DefaultCluster returns the cluster defaults: clustering off, node name
// trident@<hostname>.
func DefaultCluster() Cluster {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return Cluster{NodeName: "trident@" + h}
}

// Enabled reports whether the node gossips with other nodes.
func (c Cluster) Enabled() bool { return c.GossipListen != "" }

// RaftListenAddr returns the effective cluster.raft_listen: RaftListen, or
// gossip_listen's host with the gossip port + 1; "" when clustering is off
// or gossip_listen does not parse.
func (c Cluster) RaftListenAddr() string {
	if !c.Enabled() || c.RaftListen != "" {
		return c.RaftListen
	}
	host, port, err := splitListen(c.GossipListen)
	if err != nil {
		return ""
	}
	p, _ := strconv.Atoi(port)
	if p == 0 || p == 65535 {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1))
}

// DefaultCookieFile is the cookie file's name in the data directory.
const DefaultCookieFile = "cluster.cookie"

// CookieFilePath returns the effective cluster.cookie_file: CookieFile,
// or DefaultCookieFile in dataDir.
func (c Cluster) CookieFilePath(dataDir string) string {
	if c.CookieFile != "" {
		return c.CookieFile
	}
	return filepath.Join(dataDir, DefaultCookieFile)
}

// clusterFields are the cluster leaves of Config, for load.go's fields table.
var clusterFields = []field{
	f("cluster.node_name", "node name, unique in the cluster (also the API's node name)", func(c *Config) any { return &c.Cluster.NodeName }),
	f("cluster.name", "the cluster's name in the API and UI (empty: the node's name, or the first member's in a cluster); PUT /api/cluster-name overrides it", func(c *Config) any { return &c.Cluster.Name }),
	f("cluster.gossip_listen", "cluster gossip address, TCP and UDP, e.g. 127.0.0.1:25672 (empty: clustering off)", func(c *Config) any { return &c.Cluster.GossipListen }),
	f("cluster.advertise_addr", "gossip address peers use: IP or IP:port (empty: gossip_listen's)", func(c *Config) any { return &c.Cluster.AdvertiseAddr }),
	f("cluster.join", "comma-separated host:port gossip addresses of cluster nodes to join (also --join)", func(c *Config) any { return &c.Cluster.Join }),
	f("cluster.raft_listen", "Raft listen address, IP:port (empty: gossip_listen's port + 1, e.g. :25673)", func(c *Config) any { return &c.Cluster.RaftListen }),
	f("cluster.raft_advertise", "Raft address peers use: host or host:port (empty: raft_listen's, or gossip's host)", func(c *Config) any { return &c.Cluster.RaftAdvertise }),
	f("cluster.bootstrap_expect", "form the cluster once this many nodes are up (0: alone without --join, else wait to be added)", func(c *Config) any { return &c.Cluster.BootstrapExpect }),
	f("cluster.cookie", "shared secret every node of the cluster presents (RabbitMQ's Erlang cookie)", func(c *Config) any { return &c.Cluster.Cookie }),
	f("cluster.cookie_file", "file holding the cookie when cluster.cookie is empty; generated (mode 0600) if missing (empty: <data_dir>/cluster.cookie)", func(c *Config) any { return &c.Cluster.CookieFile }),
	f("cluster.fault_injection", "enable PUT /api/cluster/partition for partition tests (never in production)", func(c *Config) any { return &c.Cluster.FaultInjection }),
}

// flagAliases are extra flag names for fields: flag name → YAML key.
// The issue's `trident --join host:port[,host:port]`.
var flagAliases = map[string]string{"join": "cluster.join"}

// validateCluster checks the cluster section. The gossip port must not be
// one of the TCP listeners' ports (gossip binds TCP too).
func (c *Config) validateCluster() []error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("conf: %s: %s", key, fmt.Sprintf(format, args...)))
	}
	cl := c.Cluster
	if cl.NodeName == "" {
		bad("cluster.node_name", "must not be empty")
	}
	errs = append(errs, c.validateDiscovery(cl.Enabled())...)
	if !cl.Enabled() {
		if len(cl.Join) > 0 {
			bad("cluster.join", "needs cluster.gossip_listen (clustering is off)")
		}
		if cl.AdvertiseAddr != "" {
			bad("cluster.advertise_addr", "needs cluster.gossip_listen (clustering is off)")
		}
		if cl.RaftListen != "" {
			bad("cluster.raft_listen", "needs cluster.gossip_listen (clustering is off)")
		}
		if cl.RaftAdvertise != "" {
			bad("cluster.raft_advertise", "needs cluster.gossip_listen (clustering is off)")
		}
		if cl.BootstrapExpect != 0 {
			bad("cluster.bootstrap_expect", "needs cluster.gossip_listen (clustering is off)")
		}
		return errs
	}
	errs = append(errs, c.validateRaft()...)
	errs = append(errs, c.validateClusterSecurity()...)
	host, port, err := splitListen(cl.GossipListen)
	switch {
	case err != nil:
		bad("cluster.gossip_listen", "%q: %s", cl.GossipListen, err)
	case host != "" && net.ParseIP(host) == nil:
		bad("cluster.gossip_listen", "%q: host %q is not an IP address", cl.GossipListen, host)
	case port == "0":
		bad("cluster.gossip_listen", "%q: port 0: peers need a fixed port to join", cl.GossipListen)
	default:
		for _, l := range append(c.listeners(), c.tlsListeners()...) {
			if l.addr == "" {
				continue
			}
			lh, lp, err := splitListen(l.addr)
			if err == nil && lp == port && (lh == host || isWildcard(lh) || isWildcard(host)) {
				bad("cluster.gossip_listen", "%q: port %s is also used by %s", cl.GossipListen, port, l.key)
				break
			}
		}
	}
	if cl.AdvertiseAddr != "" {
		if _, _, err := ParseAdvertise(cl.AdvertiseAddr); err != nil {
			bad("cluster.advertise_addr", "%q: %s", cl.AdvertiseAddr, err)
		}
	}
	for i, j := range cl.Join {
		h, p, err := splitListen(j)
		switch {
		case err != nil:
			bad(fmt.Sprintf("cluster.join[%d]", i), "%q: %s", j, err)
		case h == "":
			bad(fmt.Sprintf("cluster.join[%d]", i), "%q: missing host", j)
		case p == "0":
			bad(fmt.Sprintf("cluster.join[%d]", i), "%q: port 0", j)
		}
	}
	return errs
}

// ParseAdvertise splits cluster.advertise_addr, an IP or IP:port, into
// the IP and the port (0 when absent).
func ParseAdvertise(s string) (ip string, port int, err error) {
	if net.ParseIP(s) != nil {
		return s, 0, nil
	}
	h, p, err := splitListen(s)
	if err != nil {
		return "", 0, err
	}
	if net.ParseIP(h) == nil {
		return "", 0, fmt.Errorf("host %q is not an IP address", h)
	}
	n, _ := strconv.Atoi(p)
	return h, n, nil
}

// validateRaft checks raft_listen (its port must be neither the gossip
// port nor a TCP listener's), raft_advertise, bootstrap_expect and the
// cookie. Clustering is on.
func (c *Config) validateRaft() []error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("conf: %s: %s", key, fmt.Sprintf(format, args...)))
	}
	cl := c.Cluster
	if cl.BootstrapExpect < 0 {
		bad("cluster.bootstrap_expect", "%d: must be 0 or more", cl.BootstrapExpect)
	}
	if len(cl.Cookie) > 255 {
		bad("cluster.cookie", "longer than 255 bytes")
	}
	if cl.Cookie != "" && strings.TrimSpace(cl.Cookie) == "" {
		bad("cluster.cookie", "only white space")
	}
	if cl.Cookie != "" && cl.CookieFile != "" {
		bad("cluster.cookie_file", "set cluster.cookie or cluster.cookie_file, not both")
	}
	if cl.RaftAdvertise != "" {
		h, p, err := net.SplitHostPort(cl.RaftAdvertise)
		switch {
		case err != nil && strings.Contains(cl.RaftAdvertise, ":") && net.ParseIP(cl.RaftAdvertise) == nil:
			bad("cluster.raft_advertise", "%q: %s", cl.RaftAdvertise, err)
		case err == nil && (h == "" || p == "0"):
			bad("cluster.raft_advertise", "%q: needs a host and a non-zero port", cl.RaftAdvertise)
		case err == nil:
			if _, _, err := splitListen(cl.RaftAdvertise); err != nil {
				bad("cluster.raft_advertise", "%q: %s", cl.RaftAdvertise, err)
			}
		}
	}
	addr := cl.RaftListenAddr()
	if addr == "" {
		if _, _, err := splitListen(cl.GossipListen); err == nil {
			bad("cluster.raft_listen", "cannot derive it from gossip_listen %q: set it", cl.GossipListen)
		}
		return errs
	}
	host, port, err := splitListen(addr)
	switch {
	case err != nil:
		bad("cluster.raft_listen", "%q: %s", addr, err)
		return errs
	case host != "" && net.ParseIP(host) == nil:
		bad("cluster.raft_listen", "%q: host %q is not an IP address", addr, host)
		return errs
	case port == "0":
		return errs // ephemeral, never conflicts
	}
	others := append([]struct{ key, addr string }{{"cluster.gossip_listen", cl.GossipListen}}, append(c.listeners(), c.tlsListeners()...)...)
	for _, l := range others {
		if l.addr == "" {
			continue
		}
		lh, lp, err := splitListen(l.addr)
		if err == nil && lp == port && (lh == host || isWildcard(lh) || isWildcard(host)) {
			bad("cluster.raft_listen", "%q: port %s is also used by %s", addr, port, l.key)
			break
		}
	}
	return errs
}
