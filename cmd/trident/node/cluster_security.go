package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/mux"
	"github.com/trident-broker/trident/conf"
)

// Security between nodes (issue 16): cluster.tls makes the mux (the
// inter-node port) mutual TLS with node certificates of the cluster's CA,
// reloaded like the client TLS files; cluster.gossip_key (and
// gossip_keyring) encrypt memberlist's gossip. The cookie is still checked
// inside TLS, as a second factor. Failure detection timings come from
// cluster.failure_detection and its overrides.

// gossipSettings fills dc's memberlist timings and gossip keys from the
// cluster configuration.
func gossipSettings(c conf.Cluster, dc *discovery.Config) error {
	mc, err := discovery.Preset(c.FailureDetection, c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult)
	if err != nil {
		return fmt.Errorf("node: cluster.failure_detection: %w", err)
	}
	dc.Memberlist = mc
	if dc.GossipKeys, err = c.GossipKeys(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// clusterTLS returns the mux options of cluster.tls (none when it is
// off) and the reloader of its files, for SIGHUP.
func clusterTLS(c conf.ClusterTLS, log *slog.Logger) ([]mux.Option, *certReloader, error) {
	if !c.Enabled() {
		return nil, nil, nil
	}
	r, err := newCertReloader(conf.TLS{CertFile: c.CertFile, KeyFile: c.KeyFile, CAFile: c.CAFile, MinVersion: "1.3"}, log)
	if err != nil {
		return nil, nil, fmt.Errorf("node: cluster.tls: %w", err)
	}
	get := func() (*tls.Config, error) {
		r.maybeReload()
		cur := r.cur.Load()
		if len(cur.Certificates) == 0 || cur.ClientCAs == nil {
			return nil, errors.New("node: cluster.tls: no certificate or CA loaded")
		}
		return mux.NodeTLS(cur.Certificates[0], cur.ClientCAs), nil
	}
	return []mux.Option{mux.WithTLS(get)}, r, nil
}
