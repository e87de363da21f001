package conf

import (
	"encoding/base64"
	"fmt"
)

// ClusterTLS makes the inter-node port (cluster.raft_listen: every Raft
// group and node-to-node RPC) mutual TLS. Every node presents CertFile
// to every peer, in both directions, and accepts only peers whose
// certificate chains to a CA of CAFile; host names are not checked
// (nodes reach each other by gossiped addresses): the cluster's CA is the
// nodes' identity, so it should sign node certificates only. The files are
// re-read when they change (looked at, at most once a second, on a new
// connection) and on SIGHUP, as the client TLS files are; connections
// already open keep their certificate. TLS 1.3 only. The cookie stays
// and is checked as well, inside the TLS session: a second factor (a
// stolen node certificate is not enough, nor a leaked cookie).
type ClusterTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
}

// Enabled reports whether the inter-node port is TLS.
func (t ClusterTLS) Enabled() bool { return t.CertFile != "" }

// Failure detection presets (cluster.failure_detection), memberlist's
// LAN, WAN and local configurations, and "fast" for tests on one host: a
// dead node is declared dead about a second after its last answer.
var FailureDetections = []string{"lan", "wan", "local", "fast"}

var clusterSecurityFields = []field{
	f("cluster.tls.cert_file", "PEM node certificate for the inter-node port; set to make it mutual TLS", func(c *Config) any { return &c.Cluster.TLS.CertFile }),
	f("cluster.tls.key_file", "PEM private key of cluster.tls.cert_file", func(c *Config) any { return &c.Cluster.TLS.KeyFile }),
	f("cluster.tls.ca_file", "PEM CA certificates a peer node's certificate must chain to", func(c *Config) any { return &c.Cluster.TLS.CAFile }),
	f("cluster.gossip_key", "base64 AES key (16, 24 or 32 bytes) that encrypts gossip; every node needs it (empty: plaintext)", func(c *Config) any { return &c.Cluster.GossipKey }),
	f("cluster.gossip_keyring", "comma-separated base64 keys also accepted from peers (key rotation)", func(c *Config) any { return &c.Cluster.GossipKeyring }),
	f("cluster.failure_detection", "memberlist timings: lan (default, also empty), wan, local or fast (tests)", func(c *Config) any { return &c.Cluster.FailureDetection }),
	f("cluster.probe_interval", "memberlist probe interval (0: the preset's)", func(c *Config) any { return &c.Cluster.ProbeInterval }),
	f("cluster.probe_timeout", "memberlist probe timeout (0: the preset's)", func(c *Config) any { return &c.Cluster.ProbeTimeout }),
	f("cluster.suspicion_mult", "memberlist suspicion multiplier (0: the preset's)", func(c *Config) any { return &c.Cluster.SuspicionMult }),
}

// GossipKeys decodes the gossip key and keyring: the primary key first;
// nil when gossip is not encrypted.
func (c Cluster) GossipKeys() ([][]byte, error) {
	if c.GossipKey == "" {
		if len(c.GossipKeyring) > 0 {
			return nil, fmt.Errorf("cluster.gossip_keyring: needs cluster.gossip_key (the key used to send)")
		}
		return nil, nil
	}
	var keys [][]byte
	for i, s := range append([]string{c.GossipKey}, c.GossipKeyring...) {
		k, err := base64.StdEncoding.DecodeString(s)
		name := "cluster.gossip_key"
		if i > 0 {
			name = fmt.Sprintf("cluster.gossip_keyring[%d]", i-1)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: not base64: %v", name, err)
		}
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("%s: %d bytes: an AES key is 16, 24 or 32 bytes", name, len(k))
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// validateClusterSecurity checks cluster.tls, the gossip keys and the
// failure detection settings. Clustering is on.
func (c *Config) validateClusterSecurity() []error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("conf: %s: %s", key, fmt.Sprintf(format, args...)))
	}
	cl := c.Cluster
	t := cl.TLS
	switch {
	case t.Enabled() && (t.KeyFile == "" || t.CAFile == ""):
		bad("cluster.tls", "cert_file needs key_file and ca_file")
	case !t.Enabled() && (t.KeyFile != "" || t.CAFile != ""):
		bad("cluster.tls.cert_file", "must be set with key_file or ca_file")
	}
	if _, err := cl.GossipKeys(); err != nil {
		errs = append(errs, fmt.Errorf("conf: %w", err))
	}
	known := false
	for _, p := range FailureDetections {
		known = known || cl.FailureDetection == p
	}
	if !known && cl.FailureDetection != "" {
		bad("cluster.failure_detection", "%q is not one of %v", cl.FailureDetection, FailureDetections)
	}
	if cl.ProbeInterval < 0 || cl.ProbeTimeout < 0 || cl.SuspicionMult < 0 {
		bad("cluster.probe_interval", "probe_interval, probe_timeout and suspicion_mult must not be negative")
	}
	return errs
}
