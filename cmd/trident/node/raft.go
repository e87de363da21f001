package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/cluster/groups"
	"github.com/trident-broker/trident/cluster/meta"
	"github.com/trident-broker/trident/cluster/mux"
	"github.com/trident-broker/trident/cluster/placement"
	"github.com/trident-broker/trident/cluster/raftstore"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/mqtt"
	"github.com/trident-broker/trident/shovel"
)

// The Raft side of clustering: one mux listener (cluster.raft_listen)
// carrying every Raft group and the metadata RPCs, one Raft DB under
// <data_dir>/raft/badger, the groups host (snapshots under
// <data_dir>/raft/snapshots; both encrypted with encryption.key_file's
// key, as the message store is) and the metadata group, whose committed
// records the node writes into its local store and applies to the core
// and the users.

// discoveryRaftKey is the gossiped metadata key of a node's Raft address.
const discoveryRaftKey = meta.RaftMetaKey

// replicatedKey reports whether a metadata record is cluster-wide: the
// core's topology (exchange.ReplicatedKey), auth's users, permissions
// and topic permissions, MQTT's retained messages and sessions, the
// shovels' definitions, the cluster operations' records
// (cluster/placement's records) and the feature flags'. Only the
// metadata group's applier asks it (StoreApplier.Replicated): which of
// the local store's records are the group's state, exported in its
// snapshots and replaced by a restore. No write is routed by it: a
// record every node holds is written by an explicit call (a command, or
// meta.Replicator), never decided by its key.
func replicatedKey(key string) bool {
	return exchange.ReplicatedKey(key) || auth.ReplicatedKey(key) ||
		mqtt.ReplicatedKey(key) || shovel.ReplicatedKey(key) || placement.OpsKey(key) ||
		featureflags.ReplicatedKey(key)
}

// usersApplyCommitted applies a committed users command to the user
// database and returns its records for the metadata group's applier.
func (n *Node) usersApplyCommitted(cmd []byte) ([]exchange.MetaOp, error) {
	recs, err := n.users.ApplyCommittedEntry(cmd)
	ops := make([]exchange.MetaOp, len(recs))
	for i, r := range recs {
		ops[i] = exchange.MetaOp{Key: r.Key, Val: r.Val}
	}
	return ops, err
}

// raftDir and raftSnapshotDir are the Raft DB's directory and its
// groups' snapshots' under data_dir.
func raftDir(dataDir string) string         { return filepath.Join(dataDir, "raft", "badger") }
func raftSnapshotDir(dataDir string) string { return filepath.Join(dataDir, "raft", "snapshots") }

// openRaftStore opens the Raft DB and checks its snapshots, encrypted
// with encryption.key_file's key as the message store is.
func (n *Node) openRaftStore(log *slog.Logger) (*raftstore.DB, error) {
	dir := raftDir(n.cfg.DataDir)
	db, err := raftstore.Open(dir, raftstore.Options{EncryptionKey: n.storeKey, SnapshotDir: raftSnapshotDir(n.cfg.DataDir)},
		log.With("component", "raftstore"))
	if err != nil {
		return nil, storeOpenError(dir, err)
	}
	return db, nil
}

// raftSide is what startRaft started, closed in reverse.
type raftSide struct {
	mux    *mux.Mux
	db     *raftstore.DB
	host   *groups.Host
	meta   *meta.Group
	repl   *meta.Replicator
	cancel context.CancelFunc // stops a bootstrap_expect wait
	certs  *certReloader      // cluster.tls, nil when off
}

func (n *Node) startRaft(f *clusterFrontEnd, advHost string) (_ *raftSide, err error) {
	c := n.cfg.Cluster
	log := n.log.With("component", "cluster")
	secret, err := clusterCookie(c, n.cfg.DataDir, log)
	if err != nil {
		return nil, err
	}
	rs := &raftSide{repl: n.repl}
	defer func() {
		if err != nil {
			if cerr := rs.close(); cerr != nil {
				log.Warn("cleanup after failed cluster start", "err", cerr)
			}
		}
	}()
	listen := c.RaftListenAddr()
	adv := c.RaftAdvertise
	if h, _, err := net.SplitHostPort(listen); adv == "" && err == nil && isUnspecified(h) && !isUnspecified(advHost) {
		adv = advHost // bound to every address: peers use gossip's host
	}
	opts, certs, err := clusterTLS(c.TLS, log)
	if err != nil {
		return nil, err
	}
	rs.certs = certs
	if rs.mux, err = mux.Listen(listen, adv, secret, log.With("component", "mux"), opts...); err != nil {
		return nil, fmt.Errorf("node: cluster.raft_listen: %w", err)
	}
	if rs.db, err = n.openRaftStore(log); err != nil {
		return nil, err
	}
	rs.host = groups.New(groups.Config{DB: rs.db, Mux: rs.mux, Dir: raftSnapshotDir(n.cfg.DataDir),
		NodeID: n.nodeName(), Log: log.With("component", "raft")})
	applier := &meta.StoreApplier{Local: n.store, Replicated: replicatedKey, Rank: meta.RestoreRank,
		Stamp: exchange.MetaStamp, Topology: n.broker.ApplyCommitted, Users: n.usersApplyCommitted,
		Parameters: n.shovelsApplyCommitted,
		Hooks: []func([]exchange.MetaOp) error{
			n.broker.ApplyMeta,
			func(ops []exchange.MetaOp) error {
				keys := make([]string, len(ops))
				for i, op := range ops {
					keys[i] = op.Key
				}
				n.users.ApplyMeta(keys)
				return nil
			},
			n.mqttApplyMeta,
			n.shovelsApplyMeta,
			f.opsApplier().ApplyMeta,
		}}
	if rs.meta, err = meta.Start(meta.Config{Host: rs.host, Mux: rs.mux, Applier: applier, Index: n.store,
		Log: log.With("group", meta.Name), Members: f.m.Members, EnableFlagsOnBootstrap: true,
		TopologyRecords: n.broker.RecordsOf}); err != nil {
		return nil, fmt.Errorf("node: metadata group: %w", err)
	}
	f.metaGroup.Store(rs.meta)
	mode := meta.ChooseStart(rs.meta.Raft().LastIndex() > 0, c.BootstrapExpect, len(c.Join) > 0, c.Discovery.Enabled())
	switch mode {
	case meta.StartRestart:
		log.Info("metadata group restarted from its state")
	case meta.StartExpect:
		var ctx context.Context
		ctx, rs.cancel = context.WithCancel(context.Background())
		log.Info("metadata group waits for the expected members", "bootstrap_expect", c.BootstrapExpect)
		go func() {
			if err := rs.meta.BootstrapExpect(ctx, c.BootstrapExpect, f.m.Members); err != nil &&
				!errors.Is(err, context.Canceled) && !errors.Is(err, meta.ErrClosed) {
				log.Error("metadata group bootstrap", "err", err)
			}
		}()
	case meta.StartAlone:
		log.Info("metadata group bootstrapped alone (no cluster.join, no bootstrap_expect)")
		if err := rs.meta.Bootstrap([]raft.Server{rs.host.Self()}); err != nil {
			return nil, fmt.Errorf("node: metadata group bootstrap: %w", err)
		}
	case meta.StartWaitAdded:
		log.Info("metadata group waits to be added by the cluster's leader")
	}
	n.repl.Attach(rs.meta)
	n.broker.SetTopologyProposer(rs.meta)
	n.users.SetProposer(rs.meta)
	if n.shovels != nil {
		n.shovels.SetProposer(rs.meta)
	}
	log.Info("raft started", "raft_listen", rs.mux.BoundAddr().String(), "raft_advertise", rs.mux.Addr())
	return rs, nil
}

// close stops replication, the groups, the mux and the DB, in that order.
func (rs *raftSide) close() error {
	var errs []error
	if rs.cancel != nil {
		rs.cancel()
	}
	if rs.repl != nil {
		rs.repl.Detach()
	}
	if rs.meta != nil {
		if err := rs.meta.Close(); err != nil && !errors.Is(err, groups.ErrNotRunning) {
			errs = append(errs, fmt.Errorf("metadata group: %w", err))
		}
	}
	if rs.host != nil {
		if err := rs.host.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if rs.mux != nil {
		_ = rs.mux.Close()
	}
	if rs.db != nil {
		if err := rs.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raft db: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (n *Node) raftSide() *raftSide {
	if f := n.clusterFront(); f != nil {
		return f.raft
	}
	return nil
}

// MetaLeader returns the node name of the metadata group's leader, "" when
// unknown or clustering is off.
func (n *Node) MetaLeader() string {
	if rs := n.raftSide(); rs != nil && rs.meta != nil {
		id, _ := rs.meta.Leader()
		return id
	}
	return ""
}

// MetaGroup returns the metadata group, nil when clustering is off.
func (n *Node) MetaGroup() *meta.Group {
	if rs := n.raftSide(); rs != nil {
		return rs.meta
	}
	return nil
}

// Mux returns the node's Raft mux, nil when clustering is off.
func (n *Node) Mux() *mux.Mux {
	if rs := n.raftSide(); rs != nil {
		return rs.mux
	}
	return nil
}

// Groups returns the node's Raft groups host, nil when clustering is off.
func (n *Node) Groups() *groups.Host {
	if rs := n.raftSide(); rs != nil {
		return rs.host
	}
	return nil
}
