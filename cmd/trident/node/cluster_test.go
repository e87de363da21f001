package node

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

func freeGossipAddr(t *testing.T) string {
	t.Helper()
	p, err := testbin.FreeTCPUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// startGossipNode starts a clustered node on a free gossip port (and an
// ephemeral Raft port), trying another port if a parallel test took the
// one picked between its check and the node's bind.
func startGossipNode(t *testing.T, set func(c *conf.Config, gossip string)) *Node {
	t.Helper()
	var last error
	for range 5 {
		c := testConfig(t)
		g := freeGossipAddr(t)
		c.Cluster.GossipListen, c.Cluster.RaftListen = g, "127.0.0.1:0"
		c.Cluster.Cookie = "test-cookie"
		set(&c, g)
		n, err := Start(c, nil)
		if err == nil {
			return n
		}
		last = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatal(last)
	return nil
}

func waitMembers(t *testing.T, n *Node, want map[string]discovery.Status) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := map[string]discovery.Status{}
		for _, m := range n.Members() {
			got[m.Name] = m.Status
		}
		match := len(got) == len(want)
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if match {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterOffByDefault: without cluster.gossip_listen nothing gossips.
func TestClusterOffByDefault(t *testing.T) {
	n, err := Start(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode(t, n)
	if m := n.Members(); m != nil {
		t.Fatalf("Members = %v", m)
	}
	if n.webCluster() != nil {
		t.Fatal("web cluster set with clustering off")
	}
}

// TestClusterTwoNodes: two nodes in one process join through --join,
// gossip their AMQP address, and a closed node is seen as left.
func TestClusterTwoNodes(t *testing.T) {
	var ga string
	a := startGossipNode(t, func(c *conf.Config, gossip string) {
		ga = gossip
		c.Cluster.NodeName = "a@test"
	})
	defer closeNode(t, a)
	b := startGossipNode(t, func(c *conf.Config, _ string) {
		c.Cluster.NodeName, c.Cluster.Join = "b@test", []string{ga}
	})
	alive := map[string]discovery.Status{"a@test": discovery.StatusAlive, "b@test": discovery.StatusAlive}
	waitMembers(t, a, alive)
	waitMembers(t, b, alive)
	for _, m := range a.Members() {
		if m.Name == "b@test" && m.Meta["amqp"] != b.AMQPAddr().String() {
			t.Errorf("b's meta: %v, want amqp %s", m.Meta, b.AMQPAddr())
		}
	}
	// b is a member once a's metadata group added it (same cookie).
	waitUntil(t, "b in a's web members", func() bool {
		ms := a.webCluster().ClusterMembers()
		return len(ms) == 2 && ms[1].Running && ms[1].Status == "alive"
	})
	closeNode(t, b)
	waitMembers(t, a, map[string]discovery.Status{"a@test": discovery.StatusAlive, "b@test": discovery.StatusLeft})
}
