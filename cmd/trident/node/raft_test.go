package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/conf"
)

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func clusterConfig(t *testing.T, name, gossip string, expect int, join ...string) conf.Config {
	t.Helper()
	c := testConfig(t)
	c.Cluster.NodeName, c.Cluster.GossipListen, c.Cluster.Join = name, gossip, join
	c.Cluster.RaftListen = "127.0.0.1:0"
	c.Cluster.BootstrapExpect = expect
	c.Cluster.Cookie = "test-cookie"
	c.Cluster.FaultInjection = true
	c.HTTP.Listen = "127.0.0.1:0"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// startClusterNode starts a clustered node on a free gossip port, trying
// another if a parallel test (another package's process) took the one
// picked before the node bound it; it returns the node and its gossip
// address.
func startClusterNode(t *testing.T, name string, expect int, join ...string) (*Node, string) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		g := freeGossipAddr(t)
		n, err := Start(clusterConfig(t, name, g, expect, join...), nil)
		if err == nil {
			return n, g
		}
		if attempt == 4 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

func hasVHost(n *Node, name string) bool { return slices.Contains(n.Broker().VHosts(), name) }

// TestClusterMeta: three nodes formed by bootstrap_expect replicate
// vhosts and users through the metadata group; the partition endpoint
// isolates one node, the others go on, and it catches up once healed.
func TestClusterMeta(t *testing.T) {
	nodes := make([]*Node, 3)
	var first string
	for i := range nodes {
		var join []string
		if i > 0 {
			join = []string{first}
		}
		n, g := startClusterNode(t, fmt.Sprintf("n%d@test", i), 3, join...)
		if i == 0 {
			first = g
		}
		nodes[i] = n
		defer closeNode(t, n)
	}
	waitUntil(t, "one metadata leader seen by all", func() bool {
		l := nodes[0].MetaLeader()
		return l != "" && nodes[1].MetaLeader() == l && nodes[2].MetaLeader() == l
	})
	for _, n := range nodes {
		if n.Mux() == nil || n.Groups() == nil || n.MetaGroup() == nil {
			t.Fatal("accessors nil with clustering on")
		}
		for _, m := range n.Members() {
			if m.Meta["raft"] == "" {
				t.Fatalf("%s gossips no raft address: %v", m.Name, m.Meta)
			}
		}
	}

	// A vhost and a user made on one node appear on every node.
	if err := nodes[1].Broker().EnsureVHost("v1"); err != nil {
		t.Fatal(err)
	}
	if err := nodes[2].Users().PutUser("alice", "pw", []string{"administrator"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		waitUntil(t, "v1 and alice everywhere", func() bool {
			_, ok := n.Users().Lookup("alice")
			return ok && hasVHost(n, "v1")
		})
	}

	// Partition node 2 from the others through its endpoint.
	var others []string
	for _, n := range nodes[:2] {
		others = append(others, n.Mux().Addr())
	}
	partition(t, nodes[2], others)
	if got := getPartition(t, nodes[2]); !slices.Equal(got, slices.Sorted(slices.Values(others))) {
		t.Fatalf("GET partition = %v", got)
	}
	waitUntil(t, "a leader among the majority", func() bool {
		return nodes[0].MetaGroup().IsLeader() || nodes[1].MetaGroup().IsLeader()
	})
	if err := nodes[0].Broker().EnsureVHost("v2"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "v2 on node 1", func() bool { return hasVHost(nodes[1], "v2") })
	time.Sleep(200 * time.Millisecond)
	if hasVHost(nodes[2], "v2") {
		t.Fatal("the isolated node applied v2")
	}
	partition(t, nodes[2], nil)
	waitUntil(t, "v2 on the healed node", func() bool { return hasVHost(nodes[2], "v2") })
}

// partitionPath is the fault injection endpoint (web/faultinjection.go).
const partitionPath = "/api/cluster/partition"

func partition(t *testing.T, n *Node, blocked []string) {
	t.Helper()
	body, _ := json.Marshal(map[string][]string{"blocked": blocked})
	req, _ := http.NewRequest(http.MethodPut, "http://"+n.HTTPAddr().String()+partitionPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json") // the API takes JSON only
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT partition: %s", resp.Status)
	}
	// Not an administrator: refused.
	req, _ = http.NewRequest(http.MethodPut, "http://"+n.HTTPAddr().String()+partitionPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth("guest", "wrong")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("PUT partition with a bad password: %s", resp.Status)
	}
}

func getPartition(t *testing.T, n *Node) []string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.HTTPAddr().String()+partitionPath, nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b struct {
		Blocked []string `json:"blocked"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatal(err)
	}
	return b.Blocked
}

// TestClusterAloneAndJoin: a node without join or bootstrap_expect forms
// a cluster of one at once; a node started with --join is added by it and
// receives the metadata written before it came.
func TestClusterAloneAndJoin(t *testing.T) {
	a, ga := startClusterNode(t, "a@test", 0)
	defer closeNode(t, a)
	waitUntil(t, "a leads", func() bool { return a.MetaLeader() == "a@test" })
	if err := a.Broker().EnsureVHost("early"); err != nil {
		t.Fatal(err)
	}
	b, _ := startClusterNode(t, "b@test", 0, ga)
	defer closeNode(t, b)
	waitUntil(t, "b follows a", func() bool { return b.MetaLeader() == "a@test" && hasVHost(b, "early") })
	if err := b.Broker().EnsureVHost("late"); err != nil { // forwarded to a
		t.Fatal(err)
	}
	if !hasVHost(a, "late") {
		t.Fatal("forwarded write not applied on the leader when Propose returned")
	}
}
