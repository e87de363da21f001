package conf

import (
	"fmt"
	"net"
	"os"
	"strconv"
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

// clusterFields are the cluster leaves of Config, for load.go's fields table.
var clusterFields = []field{
	f("cluster.node_name", "node name, unique in the cluster (also the API's node name)", func(c *Config) any { return &c.Cluster.NodeName }),
	f("cluster.gossip_listen", "cluster gossip address, TCP and UDP, e.g. 127.0.0.1:25672 (empty: clustering off)", func(c *Config) any { return &c.Cluster.GossipListen }),
	f("cluster.advertise_addr", "gossip address peers use: IP or IP:port (empty: gossip_listen's)", func(c *Config) any { return &c.Cluster.AdvertiseAddr }),
	f("cluster.join", "comma-separated host:port gossip addresses of cluster nodes to join (also --join)", func(c *Config) any { return &c.Cluster.Join }),
}

// flagAliases are extra flag names for fields: flag name → YAML key.
// The issue's `trident --join host:port[,host:port]`.
var flagAliases = map[string]string{"join": "cluster.join"}

func init() { fields = append(fields, clusterFields...) }

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
	if !cl.Enabled() {
		if len(cl.Join) > 0 {
			bad("cluster.join", "needs cluster.gossip_listen (clustering is off)")
		}
		if cl.AdvertiseAddr != "" {
			bad("cluster.advertise_addr", "needs cluster.gossip_listen (clustering is off)")
		}
		return errs
	}
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
