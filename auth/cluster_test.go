package auth

import (
	"sync"
	"testing"
	"time"
)

// clusterStore is a memStore whose writes, like a replicated store's, are
// applied to every node's store and then to every node's Users, from the
// writer's goroutine, before the write returns (as the metadata leader's
// FSM runs while the proposer waits).
type clusterStore struct {
	*memStore
	mu    *sync.Mutex
	nodes *[]*clusterNode
}

type clusterNode struct {
	st *clusterStore
	us *Users
}

func (c *clusterStore) apply(key string, val []byte, del bool) error {
	c.mu.Lock()
	nodes := *c.nodes
	c.mu.Unlock()
	for _, n := range nodes {
		if del {
			_ = n.st.memStore.DeleteMeta(key)
		} else {
			_ = n.st.memStore.PutMeta(key, val)
		}
	}
	for _, n := range nodes {
		if n.us != nil {
			n.us.ApplyMeta([]string{key})
		}
	}
	return nil
}

func (c *clusterStore) PutMeta(key string, val []byte) error { return c.apply(key, val, false) }
func (c *clusterStore) DeleteMeta(key string) error          { return c.apply(key, nil, true) }

func TestApplyMetaCluster(t *testing.T) {
	var mu sync.Mutex
	var nodes []*clusterNode
	for range 2 {
		n := &clusterNode{st: &clusterStore{memStore: newMemStore(), mu: &mu, nodes: &nodes}}
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
	}
	for _, n := range nodes {
		us, err := New(n.st, Options{})
		if err != nil {
			t.Fatal(err)
		}
		n.us = us
	}
	a, b := nodes[0].us, nodes[1].us
	// A write on a: its own ApplyMeta runs while it holds the writers'
	// lock (no deadlock), and b follows.
	done := make(chan error, 1)
	go func() {
		if err := a.PutUser("alice", "pw", []string{"administrator"}); err != nil {
			done <- err
			return
		}
		done <- a.SetPermissions("alice", "/", ".*", "", "")
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("deadlock: ApplyMeta waited for the writer")
	}
	waitUsers(t, "b sees alice", func() bool {
		_, ok := b.Lookup("alice")
		_, pok := b.Permissions("alice", "/")
		return ok && pok
	})
	if err := b.SetTopicPermissions("alice", "/", "amq.topic", "^a", "^b"); err != nil {
		t.Fatal(err)
	}
	waitUsers(t, "a sees the topic permission", func() bool { return len(a.TopicPermissions("alice", "/")) == 1 })
	if err := b.DeleteUser("alice"); err != nil {
		t.Fatal(err)
	}
	waitUsers(t, "a forgets alice", func() bool {
		_, ok := a.Lookup("alice")
		return !ok && len(a.ListPermissions()) == 0 && len(a.ListTopicPermissions()) == 0
	})
	// Idempotent; other keys ignored.
	a.ApplyMeta([]string{"user/alice", "queue/%2F/q"})
	a.ApplyMeta([]string{"exchange/x"})
	if _, ok := a.Lookup("alice"); ok {
		t.Fatal("alice back")
	}
}

// TestApplyMetaPrefix: a prefix delete that covers auth's records reloads.
func TestApplyMetaPrefix(t *testing.T) {
	st := newMemStore()
	us, err := New(st, Options{DefaultUser: "guest", DefaultPass: "guest"})
	if err != nil {
		t.Fatal(err)
	}
	st.DeleteMeta(permKey("/", "guest"))
	us.ApplyMeta([]string{"perm/"})
	if _, ok := us.Permissions("guest", "/"); ok {
		t.Fatal("permission still in memory")
	}
	for _, k := range []string{"user/x", "perm/", "tperm/a", "", "p"} {
		if !touches(k) {
			t.Errorf("touches(%q) = false", k)
		}
	}
	for _, k := range []string{"queue/x", "vhost/", "users"} {
		if touches(k) || ReplicatedKey(k) {
			t.Errorf("%q counted as auth's", k)
		}
	}
	if ReplicatedKey("p") || !ReplicatedKey("tperm/%2F/u/x") {
		t.Error("ReplicatedKey")
	}
}

func waitUsers(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
