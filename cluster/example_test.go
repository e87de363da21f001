package cluster_test

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/logbridge"
	"github.com/trident-broker/trident/cluster/raftstore"
)

// nopFSM stands for the metadata state machine (step 3 of the plan).
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, raft.ErrNothingNewToSnapshot }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

// Example shows how cmd/trident/node would start clustering, without the
// conf package: the Raft DB, membership, and the metadata Raft group. It is
// compiled, not run.
func Example() {
	log := slog.Default()
	dataDir, name := "./data", "node-a"
	seeds := []string{"node-b.example:25672"}
	raftBind, raftAdvertise := "0.0.0.0:25673", mustTCPAddr("node-a.example:25673")

	db, err := raftstore.Open(filepath.Join(dataDir, "raft", "badger"), raftstore.Options{}, log.With("component", "raftstore"))
	if err != nil {
		panic(err)
	}
	members, err := discovery.Start(discovery.Config{
		NodeName: name, BindAddr: "0.0.0.0", BindPort: discovery.DefaultPort,
		Join: seeds,
		Meta: map[string]string{"raft": raftAdvertise.String(), "amqp": "node-a.example:5672"},
		OnEvent: func(e discovery.Event) {
			log.Info("membership", "event", e.Kind, "member", e.Member.Name, "status", e.Member.Status)
		},
	}, log.With("component", "cluster"))
	if err != nil {
		panic(err)
	}
	trans, err := raft.NewTCPTransportWithLogger(raftBind, raftAdvertise, 3, 10*time.Second,
		logbridge.NewHCLogger(log, "raft-net"))
	if err != nil {
		panic(err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dataDir, "raft", "snapshots", "meta"), 2,
		logbridge.NewHCLogger(log, "raft-snap"))
	if err != nil {
		panic(err)
	}
	meta := db.Group("meta")
	rc := raft.DefaultConfig()
	rc.LocalID, rc.Logger = raft.ServerID(name), logbridge.NewHCLogger(log, "raft")
	r, err := raft.NewRaft(rc, nopFSM{}, meta, meta, snaps, trans)
	if err != nil {
		panic(err)
	}

	// Shutdown order.
	members.Leave(5 * time.Second)
	r.Shutdown().Error()
	trans.Close()
	members.Shutdown()
	db.Close()
}

func mustTCPAddr(s string) net.Addr {
	a, err := net.ResolveTCPAddr("tcp", s)
	if err != nil {
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 25673}
	}
	return a
}
