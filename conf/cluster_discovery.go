package conf

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// ClusterDiscovery finds gossip seeds in DNS (cluster.discovery), as a
// Kubernetes headless service publishes its pods: DNSName's A/AAAA
// records (each address with Port, or the node's own gossip port) or
// SRV's records (targets and ports). The name is resolved again every
// Interval while the node sees fewer alive members than bootstrap_expect
// (at least 2), and every SettledInterval afterwards, so that a node that
// comes back at a new address is found; the node's own address is left
// out, and cluster.join's seeds are joined as well.
type ClusterDiscovery struct {
	// DNSName is a name whose A/AAAA records are the nodes' addresses.
	DNSName string `yaml:"dns_name"`
	// SRV is a name whose SRV records are the nodes' gossip host and port,
	// e.g. _gossip._tcp.trident.default.svc.cluster.local.
	SRV string `yaml:"srv"`
	// Port is the gossip port joined at each address of DNSName; 0 means
	// the node's own gossip port.
	Port int `yaml:"port"`
	// DNSServer is the DNS server asked, host:port; empty means the
	// system's resolver (/etc/resolv.conf).
	DNSServer string `yaml:"dns_server"`
	// Interval is how often the name is resolved while the cluster forms;
	// 0 means 2s.
	Interval time.Duration `yaml:"interval"`
	// SettledInterval is how often it is resolved once the node sees
	// bootstrap_expect members; 0 means 30s.
	SettledInterval time.Duration `yaml:"settled_interval"`
}

// Enabled reports whether seeds come from DNS.
func (d ClusterDiscovery) Enabled() bool { return d.DNSName != "" || d.SRV != "" }

var clusterDiscoveryFields = []field{
	f("cluster.discovery.dns_name", "DNS name whose A/AAAA records are the cluster's nodes (e.g. a Kubernetes headless service)", func(c *Config) any { return &c.Cluster.Discovery.DNSName }),
	f("cluster.discovery.srv", "DNS name whose SRV records are the nodes' gossip host:port (instead of dns_name)", func(c *Config) any { return &c.Cluster.Discovery.SRV }),
	f("cluster.discovery.port", "gossip port joined at each address of dns_name (0: this node's gossip port)", func(c *Config) any { return &c.Cluster.Discovery.Port }),
	f("cluster.discovery.dns_server", "DNS server for discovery, host:port (empty: the system resolver)", func(c *Config) any { return &c.Cluster.Discovery.DNSServer }),
	f("cluster.discovery.interval", "how often the name is resolved while the cluster forms (0: 2s)", func(c *Config) any { return &c.Cluster.Discovery.Interval }),
	f("cluster.discovery.settled_interval", "how often it is resolved once bootstrap_expect members are up (0: 30s)", func(c *Config) any { return &c.Cluster.Discovery.SettledInterval }),
}

// validateDiscovery checks cluster.discovery; enabled says whether
// clustering is on.
func (c *Config) validateDiscovery(enabled bool) []error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("conf: %s: %s", key, fmt.Sprintf(format, args...)))
	}
	d := c.Cluster.Discovery
	if !enabled {
		if d.Enabled() {
			bad("cluster.discovery", "needs cluster.gossip_listen (clustering is off)")
		}
		return errs
	}
	if d.DNSName != "" && d.SRV != "" {
		bad("cluster.discovery.srv", "set cluster.discovery.dns_name or cluster.discovery.srv, not both")
	}
	for _, n := range []struct{ key, name string }{{"cluster.discovery.dns_name", d.DNSName}, {"cluster.discovery.srv", d.SRV}} {
		if n.name != "" && !validDNSName(n.name) {
			bad(n.key, "%q is not a DNS name", n.name)
		}
	}
	if d.Port < 0 || d.Port > 65535 {
		bad("cluster.discovery.port", "%d: not a port", d.Port)
	}
	if d.SRV != "" && d.Port != 0 {
		bad("cluster.discovery.port", "SRV records carry their ports: use it with dns_name")
	}
	if d.DNSServer != "" {
		h, p, err := net.SplitHostPort(d.DNSServer)
		n, perr := strconv.Atoi(p)
		switch {
		case err != nil:
			bad("cluster.discovery.dns_server", "%q: %s (want host:port, e.g. 10.96.0.10:53)", d.DNSServer, err)
		case h == "" || perr != nil || n <= 0 || n > 65535:
			bad("cluster.discovery.dns_server", "%q: needs a host and a port", d.DNSServer)
		}
	}
	if d.Interval < 0 {
		bad("cluster.discovery.interval", "%v: must not be negative", d.Interval)
	}
	if d.SettledInterval < 0 {
		bad("cluster.discovery.settled_interval", "%v: must not be negative", d.SettledInterval)
	}
	return errs
}

// validDNSName accepts a host name as DNS has them: dot-separated labels
// of at most 63 bytes (letters, digits, '-' and '_' as SRV names use),
// 253 bytes in all, an optional final dot.
func validDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, r := range l {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			default:
				return false
			}
		}
	}
	return true
}
