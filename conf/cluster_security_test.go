package conf

import (
	"strings"
	"testing"
	"time"
)

// TestClusterSecurityConfig: cluster.tls, the gossip keys and the failure
// detection load from flags and YAML and are validated by key.
func TestClusterSecurityConfig(t *testing.T) {
	key := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" // 32 bytes
	file := writeFile(t, "cluster:\n  gossip_listen: 127.0.0.1:25672\n  tls:\n    cert_file: n.pem\n    key_file: n.key\n    ca_file: ca.pem\n"+
		"  gossip_key: "+key+"\n  failure_detection: fast\n  probe_interval: 250ms\n")
	c, err := Load([]string{"--config", file, "--cluster-suspicion-mult", "5"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Cluster
	if !cl.TLS.Enabled() || cl.TLS.KeyFile != "n.key" || cl.TLS.CAFile != "ca.pem" || cl.FailureDetection != "fast" ||
		cl.ProbeInterval != 250*time.Millisecond || cl.SuspicionMult != 5 {
		t.Fatalf("loaded %+v", cl)
	}
	if keys, err := cl.GossipKeys(); err != nil || len(keys) != 1 || len(keys[0]) != 32 {
		t.Fatalf("gossip keys %v %v", keys, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-tls-cert-file", "n.pem"}, "cluster.tls"},
		{[]string{"--cluster-tls-ca-file", "ca.pem"}, "cluster.tls.cert_file"},
		{[]string{"--cluster-gossip-key", "not base64!"}, "cluster.gossip_key"},
		{[]string{"--cluster-gossip-key", "c2hvcnQ="}, "cluster.gossip_key"},
		{[]string{"--cluster-gossip-keyring", key}, "cluster.gossip_keyring"},
		{[]string{"--cluster-gossip-key", key, "--cluster-gossip-keyring", "eA=="}, "cluster.gossip_keyring[0]"},
		{[]string{"--cluster-failure-detection", "slow"}, "cluster.failure_detection"},
		{[]string{"--cluster-suspicion-mult", "-1"}, "suspicion_mult"},
	} {
		args := append([]string{"--cluster-gossip-listen", "127.0.0.1:25672"}, tc.args...)
		_, err := Load(args, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
