package test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/test/testbin"
)

// TestClusterNodesProcesses: three real trident processes on 127.0.0.1
// (distinct AMQP, HTTP and gossip ports) joined with --join each list all
// three as running in /api/nodes; one is killed with SIGKILL and the other
// two report it running=false (the detection time is logged); it restarts
// on the same ports and data and all three are running again.
func TestClusterNodesProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	const n = 3
	type node struct {
		name, gossip, http string
		p                  *testbin.Proc
	}
	nodes := make([]*node, n)
	for i := range nodes {
		hp, err := testbin.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &node{
			name:   fmt.Sprintf("trident-%d@localhost", i),
			gossip: net.JoinHostPort("127.0.0.1", strconv.Itoa(freeTCPUDPPort(t))),
			http:   net.JoinHostPort("127.0.0.1", strconv.Itoa(hp)),
		}
	}
	for i, nd := range nodes {
		var seeds []string
		for j, o := range nodes {
			if j != i {
				seeds = append(seeds, o.gossip)
			}
		}
		nd.p = testbin.Start(t, "--http-listen", nd.http, "--cluster-node-name", nd.name,
			"--cluster-gossip-listen", nd.gossip, "--cluster-raft-listen", "127.0.0.1:0", "--join", strings.Join(seeds, ","),
			// /api/nodes lists the cluster's members: nodes with one
			// cookie in one metadata group.
			"--cluster-cookie", "nodes-test", "--cluster-bootstrap-expect", strconv.Itoa(n))
	}
	all := func(running ...bool) string {
		var parts []string
		for i, nd := range nodes {
			parts = append(parts, fmt.Sprintf("%s=%v", nd.name, running[i]))
		}
		return strings.Join(parts, ",")
	}

	start := time.Now()
	for _, nd := range nodes {
		waitNodes(t, nd.http, all(true, true, true), 20*time.Second)
	}
	t.Logf("three nodes see each other running after %v", time.Since(start).Round(time.Millisecond))

	// The local node carries its statistics, remote ones their addresses.
	list := getClusterNodes(t, nodes[0].http)
	for _, m := range list {
		if m.Type != "disc" {
			t.Errorf("%s: type %q", m.Name, m.Type)
		}
		if m.Name == nodes[0].name && m.Uptime == nil {
			t.Errorf("local node without uptime: %+v", m)
		}
		if m.Name == nodes[1].name && (m.HTTPAddr != nodes[1].http || m.AMQPAddr != nodes[1].p.AMQPAddr || m.GossipAddr != nodes[1].gossip) {
			t.Errorf("remote node addresses: %+v, want http %s amqp %s gossip %s", m, nodes[1].http, nodes[1].p.AMQPAddr, nodes[1].gossip)
		}
	}

	killed := time.Now()
	nodes[2].p.Kill()
	for _, nd := range nodes[:2] {
		waitNodes(t, nd.http, all(true, true, false), 20*time.Second)
		t.Logf("%s reports SIGKILLed %s running=false after %v", nd.name, nodes[2].name, time.Since(killed).Round(time.Millisecond))
	}
	if d := time.Since(killed); d > 15*time.Second {
		t.Errorf("failure detection took %v", d)
	}

	restarted := time.Now()
	nodes[2].p.Restart()
	for _, nd := range nodes {
		waitNodes(t, nd.http, all(true, true, true), 20*time.Second)
	}
	t.Logf("restarted %s running on all three after %v (process start included)", nodes[2].name, time.Since(restarted).Round(time.Millisecond))
}

// clusterNode is the part of an /api/nodes entry the test reads.
type clusterNode struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Running    bool   `json:"running"`
	Uptime     *int64 `json:"uptime"`
	GossipAddr string `json:"gossip_addr"`
	AMQPAddr   string `json:"amqp_addr"`
	HTTPAddr   string `json:"http_addr"`
}

func fetchClusterNodes(addr string) ([]clusterNode, error) {
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/nodes", nil)
	req.SetBasicAuth("guest", "guest")
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/nodes: %s", resp.Status)
	}
	var out []clusterNode
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

func getClusterNodes(t *testing.T, addr string) []clusterNode {
	t.Helper()
	l, err := fetchClusterNodes(addr)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// nodesView is "name=running,..." sorted by name.
func nodesView(l []clusterNode) string {
	var parts []string
	for _, m := range l {
		parts = append(parts, fmt.Sprintf("%s=%v", m.Name, m.Running))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// waitNodes polls addr's /api/nodes until its view is want.
func waitNodes(t *testing.T, addr, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		l, err := fetchClusterNodes(addr)
		if err == nil {
			if last = nodesView(l); last == want {
				return
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s /api/nodes: %s, want %s after %v", addr, last, want, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
