package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/cluster/forward"
	"github.com/trident-broker/trident/cluster/meta"
	"github.com/trident-broker/trident/cluster/placement"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/web"
)

// Clustering (issue 7): when cluster.gossip_listen is set the node joins
// the cluster's gossip (cluster/discovery) under cluster.node_name, tells
// the other nodes its AMQP, HTTP and Raft addresses in its gossiped
// metadata, and lists every member in /api/nodes. It then starts its Raft
// side (raft.go): the mux on cluster.raft_listen, the Raft DB, the groups
// host and the metadata group. It runs as a front end so that Close leaves
// the cluster (peers see "left", not a failure) and stops Raft before the
// core and the store close. With gossip_listen empty nothing here runs.

// leaveTimeout bounds how long Close waits for the goodbye to go out.
const leaveTimeout = 2 * time.Second

// clusterFrontEnd is the node's membership in the cluster.
type clusterFrontEnd struct {
	m    *discovery.Membership
	raft *raftSide // nil until started
	// queues places durable queues (cluster/placement, wired in
	// cluster_queues.go).
	queues *placement.Placer
	// fwd serves peers' forwarded traffic (cluster_queues.go).
	fwd *forward.Server
	log *slog.Logger
	// metaGroup is set once the metadata group runs, placer and forget
	// once the queues are placed: OnEvent hands them membership events.
	metaGroup atomic.Pointer[meta.Group]
	placer    atomic.Pointer[placement.Placer]
	forget    atomic.Pointer[placement.Forgetter]
}

func (n *Node) startCluster() error {
	c := n.cfg.Cluster
	if !c.Enabled() {
		return nil
	}
	host, portStr, err := net.SplitHostPort(c.GossipListen)
	if err != nil {
		return fmt.Errorf("node: cluster.gossip_listen: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("node: cluster.gossip_listen: port %q", portStr)
	}
	dc := discovery.Default()
	dc.NodeName = n.nodeName()
	dc.BindAddr = host // "" binds every address
	dc.BindPort = port
	dc.Join = c.Join
	dc.DNS = discovery.DNSConfig{Name: c.Discovery.DNSName, SRV: c.Discovery.SRV, Port: c.Discovery.Port, Server: c.Discovery.DNSServer, Interval: c.Discovery.Interval, SettledInterval: c.Discovery.SettledInterval, Expect: c.BootstrapExpect}
	advHost := host
	if c.AdvertiseAddr != "" {
		ip, p, err := conf.ParseAdvertise(c.AdvertiseAddr)
		if err != nil {
			return fmt.Errorf("node: cluster.advertise_addr: %w", err)
		}
		dc.AdvertiseAddr, dc.AdvertisePort, advHost = ip, p, ip
	}
	dc.Meta = n.clusterMeta(advHost, "")
	if err := gossipSettings(c, &dc); err != nil {
		return err
	}
	f := &clusterFrontEnd{log: n.log.With("component", "cluster")}
	dc.OnEvent = func(ev discovery.Event) {
		if g := f.metaGroup.Load(); g != nil {
			g.Kick() // the leader reconciles the Raft configuration
		}
		if p := f.placer.Load(); p != nil {
			p.Notify(ev) // quorum queues' leaders reconcile their groups
		}
		if fg := f.forget.Load(); fg != nil {
			fg.Notify(ev)
		}
	}
	m, err := discovery.Start(dc, n.log.With("component", "cluster"))
	if err != nil {
		return fmt.Errorf("node: cluster: %w", err)
	}
	f.m = m
	if isUnspecified(advHost) {
		// Bound to every address: memberlist picked the address it
		// advertises; tell peers our listeners at that address.
		if h, _, err := net.SplitHostPort(m.LocalMember().Addr); err == nil && h != "" {
			advHost = h
		}
	}
	if a, err := net.ResolveTCPAddr("tcp", c.GossipListen); err == nil {
		n.served.add(web.Listener{Protocol: "clustering", Addr: a, SocketOpts: map[string]any{"role": "gossip"}})
	}
	n.frontEnds = append(n.frontEnds, f)
	n.log.Info("cluster membership started", "node", dc.NodeName, "gossip", c.GossipListen, "join", c.Join)
	if f.raft, err = n.startRaft(f, advHost); err != nil {
		return err
	}
	inter := web.Listener{Protocol: "clustering", Addr: f.raft.mux.BoundAddr(), SocketOpts: map[string]any{"role": "inter-node"}}
	if t := c.TLS; t.Enabled() { // mutual TLS between nodes (cluster_security.go)
		inter.CertFile, inter.CAFile = t.CertFile, t.CAFile
	}
	n.served.add(inter)
	admitted := f.admitted
	n.clusterMembers.Store(&admitted)
	if err := m.SetMeta(n.clusterMeta(advHost, f.raft.mux.Addr()), time.Second); err != nil {
		n.log.Warn("cluster: could not update metadata", "err", err)
	}
	n.startClusterQueues(f)
	return nil
}

// clusterMeta is the metadata gossiped about this node: the addresses of
// its AMQP and HTTP listeners, with a wildcard host replaced by host, and
// under "raft" its advertised mux address (the Raft ServerAddress of all
// its groups) once the mux runs. (An HTTP listener on port 0 is not bound
// yet and is left out.)
func (n *Node) clusterMeta(host, raftAddr string) map[string]string {
	meta := map[string]string{featureflags.GossipKey: featureflags.EncodeSupport(featureflags.Supported())}
	if raftAddr != "" {
		meta[discoveryRaftKey] = raftAddr
	}
	if n.drainer != nil && n.drainer.Draining() {
		meta[maintenanceMetaKey] = "drained" // drain.go
	}
	addr := func(listen string) string {
		h, p, err := net.SplitHostPort(listen)
		if err != nil || p == "0" {
			return ""
		}
		if isUnspecified(h) && !isUnspecified(host) {
			h = host
		}
		return net.JoinHostPort(h, p)
	}
	if a := n.AMQPAddr(); a != nil {
		meta["amqp"] = addr(a.String())
	}
	if n.cfg.HTTP.Listen != "" {
		if a := addr(n.cfg.HTTP.Listen); a != "" {
			meta["http"] = a
		}
	}
	if c := n.cfg.MQTT; c.Listen != "" || c.WSListen != "" || tlsWanted(n.cfg, c.TLSListen) || tlsWanted(n.cfg, c.WSSListen) {
		meta["mqtt"] = "1" // runs the MQTT front end (liveNodesOf)
	}
	return meta
}

func isUnspecified(h string) bool {
	if h == "" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsUnspecified()
}

func (f *clusterFrontEnd) Name() string { return "clustering" }

// Shutdown leaves the cluster (peers record "left"), then stops the Raft
// groups, the mux and the Raft DB, and gossip last.
func (f *clusterFrontEnd) Shutdown(ctx context.Context) error {
	timeout := leaveTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), 100*time.Millisecond)
	}
	var errs []error
	if err := f.m.Leave(timeout); err != nil && err != discovery.ErrShutdown {
		// Not a failed shutdown: when the whole cluster stops at once
		// nobody is left to hear the goodbye.
		f.log.Warn("cluster: leave", "err", err)
	}
	if fg := f.forget.Swap(nil); fg != nil {
		fg.Close()
	}
	if f.fwd != nil {
		f.fwd.Close() // peers' consumers end: what they held is requeued
	}
	if f.queues != nil {
		f.placer.Store(nil)
		f.queues.Close()
	}
	if f.raft != nil {
		f.metaGroup.Store(nil)
		if err := f.raft.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := f.m.Shutdown(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (f *clusterFrontEnd) ListConnections() []web.ConnectionInfo    { return nil }
func (f *clusterFrontEnd) CloseConnection(name, reason string) bool { return false }

func (n *Node) clusterFront() *clusterFrontEnd {
	for _, f := range n.frontEnds {
		if c, ok := f.(*clusterFrontEnd); ok {
			return c
		}
	}
	return nil
}

// admitted lists the gossip members that are members of the cluster:
// this node and the metadata group's servers (meta.Group.Admitted). A
// node in the gossip ring whose cookie or certificate the cluster refused
// is not one.
func (f *clusterFrontEnd) admitted() []discovery.Member {
	ms := f.m.Members()
	if f.raft == nil || f.raft.meta == nil {
		return nil
	}
	return f.raft.meta.Admitted(ms)
}

// placeable is what placement looks at (meta.Group.Placeable): the
// admitted members and those that are gone.
func (f *clusterFrontEnd) placeable() []discovery.Member {
	return f.raft.meta.Placeable(f.m.Members())
}

// Members lists the gossip ring's members as this node sees them, itself
// included, sorted by name; nil when clustering is off. Not all of them
// need be members of the cluster (clusterFrontEnd.admitted).
func (n *Node) Members() []discovery.Member {
	if c := n.clusterFront(); c != nil {
		return c.m.Members()
	}
	return nil
}

// webCluster is the web.Cluster for the management API, nil when
// clustering is off (the API then lists this node alone).
func (n *Node) webCluster() web.Cluster {
	if n.clusterFront() == nil {
		return nil
	}
	return clusterView{n}
}

// clusterView adapts the admitted members to web.Cluster: /api/nodes
// lists the cluster's members, not every node in the gossip ring.
type clusterView struct{ n *Node }

func (v clusterView) ClusterMembers() []web.ClusterMember {
	var ms []discovery.Member
	if f := v.n.clusterFront(); f != nil {
		ms = f.admitted()
	}
	out := make([]web.ClusterMember, 0, len(ms))
	for _, m := range ms {
		out = append(out, web.ClusterMember{Name: m.Name, Running: m.Status == discovery.StatusAlive,
			Status: m.Status.String(), GossipAddr: m.Addr, Meta: m.Meta, Drained: m.Meta[maintenanceMetaKey] != ""})
	}
	return out
}
