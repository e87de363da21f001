package meta

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// usersApply is the node's StoreApplier.Users over us (as
// cmd/trident/node wires it).
func usersApply(us *auth.Users) func([]byte) ([]exchange.MetaOp, error) {
	return func(cmd []byte) ([]exchange.MetaOp, error) {
		recs, err := us.ApplyCommittedEntry(cmd)
		ops := make([]exchange.MetaOp, len(recs))
		for i, r := range recs {
			ops[i] = exchange.MetaOp{Key: r.Key, Val: r.Val}
		}
		return ops, err
	}
}

func usersReplicated(k string) bool { return replicated(k) || auth.ReplicatedKey(k) }

// TestUsersCommands: with the cluster's typed commands enabled, a user,
// its permission and its topic permission made on a follower are
// proposed as users commands (no record goes through the records path)
// and every member applies them: in memory (the password hash decided
// once, so the user logs in on every node) and in its own store; a delete
// on another node removes the user and its permissions everywhere; a
// command for a non-administrator is refused before anything is
// proposed.
func TestUsersCommands(t *testing.T) {
	fm := &fakeMembers{old: map[string]bool{}}
	nodes := make([]*testNode, 3)
	repls := make([]*Replicator, 3)
	for i := range nodes {
		local := store.NewMemory()
		repls[i] = NewReplicator(local)
		us, err := auth.New(local, auth.Options{Replicator: repls[i]})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &testNode{id: fmt.Sprintf("n%d", i), dir: t.TempDir(), local: local, members: fm.list,
			enableFlags: true, users: us}
	}
	fm.nodes = nodes
	for _, n := range nodes {
		n.start(t)
	}
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	var servers []raft.Server
	for _, n := range nodes {
		servers = append(servers, n.server())
	}
	for _, n := range nodes {
		if err := n.g.Bootstrap(servers); err != nil {
			t.Fatal(err)
		}
	}
	leader := leaderOf(t, nodes)
	for i, n := range nodes {
		waitFor(t, n.id+": topology_commands enabled", func() bool { return n.g.Flags().Enabled(featureflags.TopologyCommands) })
		repls[i].Attach(n.g) // the records path, as a node has it
		n.users.SetProposer(n.g)
	}
	f := others(nodes, leader)[0]

	if err := f.users.PutUser("alice", "s3cret", []string{"management"}); err != nil {
		t.Fatal(err)
	}
	if err := f.users.SetPermissions("alice", "/", "^a", ".*", ""); err != nil {
		t.Fatal(err)
	}
	if err := f.users.SetTopicPermissions("alice", "/", "amq.topic", "^x", ".*"); err != nil {
		t.Fatal(err)
	}
	if err := f.users.SetPermissions("nobody", "/", ".*", ".*", ".*"); !errors.Is(err, auth.ErrNoSuchUser) {
		t.Fatalf("permission of a user no node has: %v, want ErrNoSuchUser", err)
	}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	for _, n := range nodes {
		waitFor(t, n.id+": alice's topic permission", func() bool { return len(n.users.TopicPermissions("alice", "/")) == 1 })
		if _, err := n.users.Authenticate("alice", "s3cret", addr); err != nil {
			t.Fatalf("%s: alice cannot log in: %v", n.id, err)
		}
		if p, ok := n.users.Permissions("alice", "/"); !ok || p.Configure != "^a" {
			t.Fatalf("%s: alice's permission %+v %v", n.id, p, ok)
		}
		for _, k := range []string{"user/alice", "perm/", "tperm/"} {
			if !hasPrefix(n.local, k) {
				t.Fatalf("%s: no record %q in the local store", n.id, k)
			}
		}
		for _, k := range n.hooked() {
			if auth.ReplicatedKey(k) {
				t.Fatalf("%s: record %q went through the records path, not a users command", n.id, k)
			}
		}
	}

	// The check is on the command, for any node: bob is no administrator.
	if err := f.users.PutUser("bob", "pw", nil); err != nil {
		t.Fatal(err)
	}
	bob, _ := f.users.Lookup("bob")
	err := f.users.Do(auth.Actor{Users: f.users, User: bob}, auth.Command{Op: auth.OpPutUser, User: "mallory"})
	if !errors.Is(err, auth.ErrAccessRefused) {
		t.Fatalf("a non-administrator's users command: %v, want ErrAccessRefused", err)
	}
	err = f.users.Do(auth.Actor{Users: f.users, User: bob}, auth.Command{Op: auth.OpSetPermissions, User: "bob", VHost: "/", Configure: ".*", Write: ".*", Read: ".*"})
	if !errors.Is(err, auth.ErrAccessRefused) {
		t.Fatalf("a non-administrator's permission change: %v, want ErrAccessRefused", err)
	}

	// Deleted on another node: gone everywhere, with its permissions.
	if err := leader.users.DeleteUser("alice"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		waitFor(t, n.id+": alice gone", func() bool { _, ok := n.users.Lookup("alice"); return !ok })
		if _, ok := n.users.Lookup("mallory"); ok {
			t.Fatalf("%s: the refused command created a user", n.id)
		}
		if _, ok := n.users.Permissions("bob", "/"); ok {
			t.Fatalf("%s: the refused command set a permission", n.id)
		}
		waitFor(t, n.id+": alice's records gone", func() bool {
			return !hasPrefix(n.local, "user/alice") && !hasPrefix(n.local, "perm/") && !hasPrefix(n.local, "tperm/")
		})
	}
}

func hasPrefix(st *store.Memory, prefix string) bool {
	found := false
	_ = st.LoadMeta(prefix, func(k string, _ []byte) error {
		found = found || strings.HasPrefix(k, prefix)
		return nil
	})
	return found
}

// TestFSMHaltsOnNewerUsersCommand: a users command of a newer format
// halts the FSM (the node never holds a database that skipped a change);
// one the node reads is applied and its records written.
func TestFSMHaltsOnNewerUsersCommand(t *testing.T) {
	local := store.NewMemory()
	us, err := auth.New(local, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := &StoreApplier{Local: local, Replicated: usersReplicated, Users: usersApply(us)}
	f, err := newFSM(a, local, featureflags.NewSet(), discardLog())
	if err != nil {
		t.Fatal(err)
	}
	ok := auth.EncodeCommand(auth.Command{Op: auth.OpPutUser, User: "carol"})
	if r := f.Apply(&raft.Log{Index: 1, Data: EncodeCommand(Command{Kind: KindUsers, Users: ok})}); r != nil {
		t.Fatalf("apply: %v", r)
	}
	if _, found := us.Lookup("carol"); !found || !hasPrefix(local, "user/carol") {
		t.Fatal("the users command was not applied")
	}
	newer := append([]byte{9}, ok[1:]...)
	if err, _ := f.Apply(&raft.Log{Index: 2, Data: EncodeCommand(Command{Kind: KindUsers, Users: newer})}).(error); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("a newer users command: %v, want ErrUnreadable", err)
	}
	if f.Applied() != 1 || f.Halted() == nil {
		t.Fatalf("applied %d halted %v, want 1 and halted", f.Applied(), f.Halted())
	}
	_, c, err := DecodeEntry(EncodeCommand(Command{Kind: KindUsers, Users: ok}))
	if err != nil || c.Kind != KindUsers || string(c.Users) != string(ok) {
		t.Fatalf("round trip: %+v %v", c, err)
	}
}

type newerErr struct{}

func (newerErr) Error() string    { return "newer" }
func (newerErr) Unreadable() bool { return true }

// TestFSMAppliesParameters: a parameter command reaches the node's
// parameters (StoreApplier.Parameters) and its records are written; one
// the parameters call newer halts the FSM; a node without a parameters
// applier halts rather than skip it.
func TestFSMAppliesParameters(t *testing.T) {
	local := store.NewMemory()
	var seen []string
	a := &StoreApplier{Local: local, Replicated: usersReplicated, Parameters: func(cmd []byte) ([]exchange.MetaOp, error) {
		if string(cmd) == "newer" {
			return nil, newerErr{}
		}
		seen = append(seen, string(cmd))
		return []exchange.MetaOp{{Key: "shovel/\x00" + string(cmd), Val: []byte("def")}}, nil
	}}
	f, err := newFSM(a, local, featureflags.NewSet(), discardLog())
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Apply(&raft.Log{Index: 1, Data: EncodeCommand(Command{Kind: KindParameters, Params: []byte("s1")})}); r != nil {
		t.Fatalf("apply: %v", r)
	}
	if len(seen) != 1 || !hasPrefix(local, "shovel/\x00s1") {
		t.Fatalf("applied %q; record written %v", seen, hasPrefix(local, "shovel/\x00s1"))
	}
	if err, _ := f.Apply(&raft.Log{Index: 2, Data: EncodeCommand(Command{Kind: KindParameters, Params: []byte("newer")})}).(error); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("a newer parameter command: %v, want ErrUnreadable", err)
	}
	if f.Applied() != 1 {
		t.Fatalf("applied %d", f.Applied())
	}
	f2, err := newTestFSM(t, store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	f2.log = discardLog()
	if err, _ := f2.Apply(&raft.Log{Index: 1, Data: EncodeCommand(Command{Kind: KindParameters, Params: []byte("s1")})}).(error); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("a node without a parameters applier: %v, want ErrUnreadable", err)
	}
}
