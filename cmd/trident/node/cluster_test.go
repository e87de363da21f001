package node

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
)

func freeGossipAddr(t *testing.T) string {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
	}
	t.Fatal("no free port")
	return ""
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
	ga, gb := freeGossipAddr(t), freeGossipAddr(t)
	ca := testConfig(t)
	ca.Cluster.NodeName, ca.Cluster.GossipListen = "a@test", ga
	ca.Cluster.RaftListen = "127.0.0.1:0" // gossip port + 1 may be taken
	a, err := Start(ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode(t, a)
	cb := testConfig(t)
	cb.Cluster.NodeName, cb.Cluster.GossipListen, cb.Cluster.Join = "b@test", gb, []string{ga}
	cb.Cluster.RaftListen = "127.0.0.1:0"
	b, err := Start(cb, nil)
	if err != nil {
		t.Fatal(err)
	}
	alive := map[string]discovery.Status{"a@test": discovery.StatusAlive, "b@test": discovery.StatusAlive}
	waitMembers(t, a, alive)
	waitMembers(t, b, alive)
	for _, m := range a.Members() {
		if m.Name == "b@test" && m.Meta["amqp"] != b.AMQPAddr().String() {
			t.Errorf("b's meta: %v, want amqp %s", m.Meta, b.AMQPAddr())
		}
	}
	if ms := a.webCluster().ClusterMembers(); len(ms) != 2 || !ms[1].Running || ms[1].Status != "alive" {
		t.Errorf("web members: %+v", ms)
	}
	closeNode(t, b)
	waitMembers(t, a, map[string]discovery.Status{"a@test": discovery.StatusAlive, "b@test": discovery.StatusLeft})
}
