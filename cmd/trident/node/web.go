package node

import (
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/cmd/internal/version"
	"github.com/trident-broker/trident/web"
)

// The management API, the Prometheus listener and boot-time definitions.

// nodeName is cluster.node_name, "trident@<host>" by default.
func (n *Node) nodeName() string {
	if n.cfg.Cluster.NodeName != "" {
		return n.cfg.Cluster.NodeName
	}
	return "trident@" + hostname()
}

func (n *Node) startHTTP() error {
	var ln net.Listener
	if n.cfg.HTTP.Listen != "" { // else only http.tls_listen serves (tls.go)
		var err error
		if ln, err = net.Listen("tcp", n.cfg.HTTP.Listen); err != nil {
			return fmt.Errorf("node: http.listen: %w", err)
		}
		n.httpLn = ln
	}
	n.api = web.New(web.Options{
		Version:       version.Version(),
		Users:         n.users,
		Core:          n.broker,
		Conns:         connections{n},
		Node:          n.nodeName(),
		Log:           n.log.With("component", "web"),
		StatsInterval: n.cfg.HTTP.StatsInterval,
		Listeners:     n.listeners,
		DataDir:       n.cfg.DataDir,
		MemLimit:      n.memoryLimit(),
		DiskFreeLimit: int64(n.cfg.DiskFreeLimit),
		Cluster:       n.webCluster(),
		OAuth:         n.oauthUI(),
		Shovels:       n.shovels,
		Bridges:       n.shovels,
		ClusterName:   n.cfg.Cluster.Name,
		ClusterNames:  clusterNames{n},
		FeatureFlags:  featureFlagsView{n},
		Maintenance:   n.drainer,
		MQTT:          mqttView{n},
		// cluster.fault_injection: /api/cluster/partition (partition.go)
		FaultInjection: n.faultInjector(),

		MaxDefinitionsBody: int64(n.cfg.HTTP.MaxDefinitionsBody),
	})
	n.http = &http.Server{Handler: n.api.Handler(), ReadHeaderTimeout: n.cfg.AMQP.HandshakeTimeout}
	if ln == nil {
		return nil
	}
	n.serveIn("http", ln, n.http.Serve, nil)
	n.serve("http", ln.Addr())
	n.log.Info("listening", "protocol", "http", "addr", ln.Addr().String())
	return nil
}

// startMetrics serves Prometheus /metrics and /metrics/per-object.
func (n *Node) startMetrics() error {
	var ln net.Listener
	if n.cfg.Prometheus.Listen != "" { // else only prometheus.tls_listen serves (tls.go)
		var err error
		if ln, err = net.Listen("tcp", n.cfg.Prometheus.Listen); err != nil {
			return fmt.Errorf("node: prometheus.listen: %w", err)
		}
		n.metricsLn = ln
	}
	o := web.MetricsOptions{Core: n.broker, Conns: connections{n}, Node: n.nodeName(), Version: version.Version(),
		MemLimit: n.memoryLimit(), DiskFreeLimit: int64(n.cfg.DiskFreeLimit), DataDir: n.cfg.DataDir}
	if n.Groups() != nil {
		o.RaftGroups, o.Raft = n.raftGroups, web.NewRaftSink()
		if err := web.InstallRaftSink(o.Raft); err != nil {
			return fmt.Errorf("node: raft metrics: %w", err)
		}
	}
	m := web.NewMetricsWith(o)
	n.metrics = &http.Server{Handler: m.Handler(), ReadHeaderTimeout: n.cfg.AMQP.HandshakeTimeout}
	if ln == nil {
		return nil
	}
	n.serveIn("prometheus", ln, n.metrics.Serve, nil)
	n.serve("http/prometheus", ln.Addr())
	n.log.Info("listening", "protocol", "prometheus", "addr", ln.Addr().String())
	return nil
}

// raftGroups lists the node's Raft groups for /metrics.
func (n *Node) raftGroups() []web.RaftGroup {
	h := n.Groups()
	if h == nil {
		return nil
	}
	var out []web.RaftGroup
	for _, name := range h.Names() {
		r, ok := h.Raft(name)
		if !ok {
			continue
		}
		out = append(out, web.RaftGroup{Name: name, Leader: r.State() == raft.Leader, Term: r.CurrentTerm(),
			CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex()})
	}
	return out
}

// MetricsAddr returns the Prometheus listener's address, or nil when
// disabled.
func (n *Node) MetricsAddr() net.Addr {
	if n.metricsLn == nil {
		return nil
	}
	return n.metricsLn.Addr()
}

// importDefinitions loads a definitions.json file (RabbitMQ's format) at
// boot, as RabbitMQ's load_definitions does. Any failure stops the boot.
func (n *Node) importDefinitions(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("node: definitions: %w", err)
	}
	if err := web.ImportDefinitions(n.broker, n.users, auth.Actor{Unrestricted: true}, data, "", n.log.With("component", "definitions")); err != nil {
		return fmt.Errorf("node: definitions %s: %w", path, err)
	}
	n.log.Info("definitions imported", "file", path)
	return nil
}

// importShovels declares the shovels of the definitions file at boot, run
// as the default user (RabbitMQ imports them as its internal user).
func (n *Node) importShovels(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("node: definitions: %w", err)
	}
	if err := web.ImportShovels(n.shovels, n.broker, data, "", n.cfg.DefaultUser); err != nil {
		return fmt.Errorf("node: definitions %s: %w", path, err)
	}
	return nil
}
