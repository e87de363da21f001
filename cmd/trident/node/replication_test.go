package node

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/trident-broker/trident/cluster/meta"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// guardStore is the local store a clustered node gives the core, the
// users, the shovels and MQTT in TestClusterLocalStoreTakesNoReplicatedWrite.
// Once armed it refuses (and records) every write of a replicated record:
// in a cluster those reach the local store only through the metadata
// group's applier, which writes to the node's store itself, never through
// this one. A write site that wrote such a record here would keep it on
// this node alone.
type guardStore struct {
	*store.Badger
	armed atomic.Bool

	mu  sync.Mutex
	bad []string
}

func (g *guardStore) check(op string, keys ...string) error {
	if !g.armed.Load() {
		return nil
	}
	for _, k := range keys {
		if replicatedKey(k) {
			g.mu.Lock()
			g.bad = append(g.bad, fmt.Sprintf("%s %q", op, k))
			g.mu.Unlock()
			return fmt.Errorf("guard: %s of the replicated record %q to the local store", op, k)
		}
	}
	return nil
}

// fail fails t if a replicated record was written to the local store.
func (g *guardStore) fail(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.bad) > 0 {
		t.Fatalf("replicated records written to the local store, not through the metadata group: %v", g.bad)
	}
}

func (g *guardStore) PutMeta(key string, val []byte) error {
	if err := g.check("put", key); err != nil {
		return err
	}
	return g.Badger.PutMeta(key, val)
}

func (g *guardStore) DeleteMeta(key string) error {
	if err := g.check("delete", key); err != nil {
		return err
	}
	return g.Badger.DeleteMeta(key)
}

func (g *guardStore) DeleteMetaPrefix(prefix string) error {
	if err := g.check("prefix delete", prefix); err != nil {
		return err
	}
	return g.Badger.DeleteMetaPrefix(prefix)
}

func (g *guardStore) WriteMetaBatch(keys []string, vals [][]byte) error {
	if err := g.check("batch write", keys...); err != nil {
		return err
	}
	return g.Badger.WriteMetaBatch(keys, vals)
}

// commandsOff is the metadata group as auth and the shovels see it while
// the cluster's topology_commands flag is off (a v0.1.0 member): their
// changes are written as records, through the replicator.
type commandsOff struct{ *meta.Group }

func (commandsOff) UserCommands() bool      { return false }
func (commandsOff) ParameterCommands() bool { return false }

// TestClusterLocalStoreTakesNoReplicatedWrite: on a clustered node, the
// records every node holds that are not commands are written by explicit
// replicator calls, never to the local store the writers are given: a
// user and its permission and a shovel definition with commands off, an
// MQTT retained message and persistent session (real client), a stream's
// named offset, a quorum queue's members record and the cluster name. The
// guard store refuses any such local write, and each record is found in
// the node's store, written there by the metadata group's applier. A
// stream's delete takes its named offsets with it, at once.
func TestClusterLocalStoreTakesNoReplicatedWrite(t *testing.T) {
	var guard *guardStore
	prev := localStore
	localStore = func(b *store.Badger) exchange.Store {
		guard = &guardStore{Badger: b}
		return guard
	}
	t.Cleanup(func() { localStore = prev })

	var n *Node
	for attempt := 0; ; attempt++ {
		c := clusterConfig(t, "a@test", freeGossipAddr(t), 0)
		m := conf.Default().MQTT
		m.Listen, m.WSListen, m.TLSListen, m.WSSListen = "127.0.0.1:0", "", "", ""
		c.MQTT = m
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		var err error
		if n, err = Start(c, nil); err == nil {
			break
		}
		if attempt == 4 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
	defer closeNode(t, n)
	waitUntil(t, "the metadata group leads", func() bool { return n.MetaLeader() == "a@test" })
	g := n.MetaGroup()
	n.Users().SetProposer(commandsOff{g})
	n.shovels.SetProposer(commandsOff{g})
	guard.armed.Store(true)

	// Users and permissions, shovel definitions (commands off).
	if err := n.Users().PutUser("alice", "pw", []string{"management"}); err != nil {
		t.Fatal(err)
	}
	if err := n.Users().SetPermissions("alice", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.shovels.Put("/", "sh", "guest", map[string]any{"src-uri": "amqp://", "src-queue": "a",
		"dest-uri": "amqp://", "dest-queue": "b"}); err != nil {
		t.Fatal(err)
	}

	// MQTT: a persistent session and a retained message, from a client.
	opts := mqtt3.NewClientOptions().AddBroker("tcp://" + n.MQTTAddr().String()).SetClientID("guarded").
		SetCleanSession(false).SetUsername("guest").SetPassword("guest").SetAutoReconnect(false)
	cl := mqtt3.NewClient(opts)
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	if tok := cl.Subscribe("t/#", 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt subscribe: %v", tok.Error())
	}
	if tok := cl.Publish("t/r", 1, true, "kept"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt retained publish: %v", tok.Error())
	}
	cl.Disconnect(100)

	// A stream's named offset; a quorum queue's members record.
	v, _ := n.Broker().VHost("/")
	if _, err := v.DeclareQueue("s", exchange.QueueOpts{Durable: true, Args: exchange.Table{"x-queue-type": "stream"}}); err != nil {
		t.Fatal(err)
	}
	sq, err := v.Queue("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.StoreStreamOffset("reader", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := v.DeclareQueue("qq", exchange.QueueOpts{Durable: true, Args: exchange.Table{"x-queue-type": "quorum"}}); err != nil {
		t.Fatal(err)
	}
	qq, err := v.Queue("qq", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The record is committed (a new entry applied); the queue's group
	// then goes back to the members alive, which writes it again.
	before := g.Raft().AppliedIndex()
	if err := v.SetQueueMembers("qq", qq.ID(), []string{"a@test", "b@test"}); err != nil {
		t.Fatal(err)
	}
	if after := g.Raft().AppliedIndex(); after <= before {
		t.Fatalf("SetQueueMembers committed nothing: applied index %d, then %d", before, after)
	}
	if err := (clusterNames{n}).SetClusterName("guarded"); err != nil {
		t.Fatal(err)
	}

	has := func(prefix, contains string) bool {
		found := false
		_ = n.store.LoadMeta(prefix, func(k string, val []byte) error {
			found = found || strings.Contains(k+" "+string(val), contains)
			return nil
		})
		return found
	}
	for _, r := range []struct{ prefix, contains string }{
		{"user/alice", "alice"}, {"perm/", ".*"}, {"shovel/", "src-queue"},
		{"mqtt-session/", "guarded"}, {"mqtt-retained/", "t/r"},
		{"streamoff/", "offset"}, {"queue//\x00qq", "members"}, {clusterNameKey, "guarded"},
	} {
		waitUntil(t, fmt.Sprintf("record %q in the node's store", r.prefix), func() bool {
			guard.fail(t)
			return has(r.prefix, r.contains)
		})
	}
	guard.fail(t)

	// The stream deleted: every node applies the delete, and its named
	// offsets go with the command's records, not by a proposal made from
	// the apply (which would wait for that very apply).
	waitUntil(t, "topology commands enabled", g.TopologyCommands)
	if _, err := v.DeleteQueue("s", false, false, nil); err != nil {
		t.Fatalf("stream delete: %v", err)
	}
	if has("streamoff/", "offset") {
		t.Fatal("the deleted stream's named offsets are still in the store")
	}
	guard.fail(t)
}
