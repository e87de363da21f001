package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

// A cluster of real trident processes on 127.0.0.1 for the multi-node
// tests: each node has its own AMQP, HTTP, gossip and Raft ports and data
// directory; they find each other by gossip and form the metadata Raft
// group once all are up (bootstrap_expect), with fault injection on so
// that a test can partition them.

type cnode struct {
	i                       int
	name, gossip, raft, web string
	p                       *testbin.Proc
}

func (c *cnode) url() string { return c.p.AMQPURL }

// startCluster starts n nodes and waits until each sees all n running.
func startCluster(t *testing.T, n int, extra ...string) []*cnode {
	t.Helper()
	return startClusterWith(t, n, nil, extra...)
}

// startClusterWith is startCluster with node i's own arguments
// perNode(i) (nil: none) after extra, such as its listeners' ports.
func startClusterWith(t *testing.T, n int, perNode func(i int) []string, extra ...string) []*cnode {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	bin, err := testbin.Binary()
	if err != nil {
		t.Fatal(err)
	}
	nodes := startClusterBin(t, bin, n, perNode, extra...)
	// A new cluster enables its release's stable feature flags once it
	// has bootstrapped (cluster/meta enableOnBootstrap), a moment after
	// every node is up; until then what they gate is refused (a named
	// stream producer: precondition failed). Tests start from there.
	for _, nd := range nodes {
		eventually(t, 30*time.Second, nd.name+"'s stable feature flags enabled", func() bool {
			var fs []featureFlag
			if code, err := nd.tryAPI("GET", "/api/feature-flags", nil, &fs); err != nil || code != 200 {
				return false
			}
			for _, f := range fs {
				if f.Stability == "stable" && f.State != "enabled" {
					return false
				}
			}
			return len(fs) > 0
		})
	}
	return nodes
}

// startClusterBin is startClusterWith running the executable bin (a
// previous release's, for an upgrade test).
func startClusterBin(t *testing.T, bin string, n int, perNode func(i int) []string, extra ...string) []*cnode {
	t.Helper()
	nodes := make([]*cnode, n)
	for i := range nodes {
		hp, err := testbin.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		rp, err := testbin.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &cnode{
			i:      i,
			name:   fmt.Sprintf("trident-%d@localhost", i),
			gossip: net.JoinHostPort("127.0.0.1", strconv.Itoa(freeTCPUDPPort(t))),
			raft:   net.JoinHostPort("127.0.0.1", strconv.Itoa(rp)),
			web:    net.JoinHostPort("127.0.0.1", strconv.Itoa(hp)),
		}
	}
	// Every node's seeds first: a node retried on new ports changes its
	// own addresses while the others start.
	seedsOf := make([][]string, n)
	for i := range nodes {
		for j, o := range nodes {
			if j != i {
				seedsOf[i] = append(seedsOf[i], o.gossip)
			}
		}
	}
	var wg sync.WaitGroup
	for i, nd := range nodes {
		seeds := seedsOf[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; ; attempt++ {
				args := append([]string{"--http-listen", nd.web, "--cluster-node-name", nd.name,
					"--cluster-gossip-listen", nd.gossip, "--cluster-raft-listen", nd.raft,
					"--cluster-bootstrap-expect", strconv.Itoa(n), "--cluster-cookie", "test-cookie",
					"--cluster-fault-injection=true", "--join", strings.Join(seeds, ",")}, extra...)
				if perNode != nil {
					args = append(args, perNode(i)...)
				}
				p, err := testbin.Launch(context.Background(), testbin.Options{Binary: bin,
					DataDir: filepath.Join(t.TempDir(), "data"), ExtraArgs: args})
				if err != nil && attempt < 2 && strings.Contains(err.Error(), "address already in use") {
					// A port picked free was taken meanwhile (an outgoing
					// connection's ephemeral port, often): new ports. The
					// node still joins through the others' addresses.
					t.Logf("start %s: a port was taken; retrying on new ports", nd.name)
					hp, herr := testbin.FreePort()
					rp, rerr := testbin.FreePort()
					gp, gerr := testbin.FreeTCPUDPPort()
					if herr == nil && rerr == nil && gerr == nil {
						nd.web = net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))
						nd.raft = net.JoinHostPort("127.0.0.1", strconv.Itoa(rp))
						nd.gossip = net.JoinHostPort("127.0.0.1", strconv.Itoa(gp))
						continue
					}
				}
				if err != nil {
					t.Errorf("start %s: %v", nd.name, err)
					return
				}
				nd.p = p
				return
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		// One at a time: each node leaves while the others still hold a
		// majority, and they take it out of the Raft configuration, so
		// the last one is a group of one that can still commit what its
		// shutdown writes. Stopped all at once, the last could be left
		// without a majority and overrun its shutdown. With two left, the
		// one that does not lead the metadata group goes first: the
		// leader can take it out alone, while a follower left with a
		// departed leader could not elect itself (a test that froze or
		// killed nodes leaves the leadership anywhere).
		stopNodesInTurn(t, nodes)
		for _, nd := range nodes {
			if nd.p == nil {
				continue
			}
			if t.Failed() && nd.p.LogPath != "" {
				if b, err := os.ReadFile(nd.p.LogPath); err == nil {
					if dir := os.Getenv("TRIDENT_KEEP_LOGS"); dir != "" {
						// Whole logs of a failed run, for a closer look.
						_ = os.MkdirAll(dir, 0o755)
						_ = os.WriteFile(filepath.Join(dir, t.Name()+"-"+strconv.Itoa(nd.i)+".log"), b, 0o644)
					}
					if len(b) > 6000 {
						b = b[len(b)-6000:]
					}
					t.Logf("tail of %s's log:\n%s", nd.name, b)
				}
			}
			nd.p.Cleanup()
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	var want []string
	for _, nd := range nodes {
		want = append(want, nd.name+"=true")
	}
	for _, nd := range nodes {
		waitNodes(t, nd.web, strings.Join(want, ","), 30*time.Second)
	}
	return nodes
}

// metaLeaderName is the metadata group's leader as node c reports it,
// stopNodesInTurn is stopInTurn over cluster nodes (nil ones skipped).
func stopNodesInTurn(t testing.TB, nodes []*cnode) {
	procs, names := make([]*testbin.Proc, len(nodes)), make([]string, len(nodes))
	for i, nd := range nodes {
		if nd != nil {
			procs[i], names[i] = nd.p, nd.name
		}
	}
	stopInTurn(t, procs, names, func(i int) string { return metaLeaderName(nodes[i]) })
}

// stopInTurn stops the running processes one at a time (see startCluster's
// cleanup for why); with two left, the one that does not lead the metadata
// group goes first. leader(i) asks process i for the metadata leader's name.
func stopInTurn(t testing.TB, procs []*testbin.Proc, names []string, leader func(i int) string) {
	for {
		var running []int
		for i, p := range procs {
			if p != nil && p.Running() {
				running = append(running, i)
			}
		}
		if len(running) == 0 {
			return
		}
		i := running[0]
		if len(running) == 2 && leader(running[1]) == names[i] {
			i = running[1]
		}
		if err := procs[i].Stop(); err != nil {
			t.Errorf("stop %s: %v", names[i], err)
		}
	}
}

// "" if it does not answer.
func metaLeaderName(c *cnode) string {
	var ms []struct {
		Name       string `json:"name"`
		MetaLeader bool   `json:"meta_leader"`
	}
	if code, err := c.tryAPI("GET", "/api/nodes", nil, &ms); err != nil || code != 200 {
		return ""
	}
	for _, m := range ms {
		if m.MetaLeader {
			return m.Name
		}
	}
	return ""
}

// api calls the management API of a node as guest; out may be nil.
func (c *cnode) api(t testing.TB, method, path string, body any, out any) int {
	t.Helper()
	code, err := c.tryAPI(method, path, body, out)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, c.name, err)
	}
	return code
}

func (c *cnode) tryAPI(method, path string, body any, out any) (int, error) {
	return c.tryAPIAs("guest", "guest", method, path, body, out)
}

// tryAPIAs is tryAPI as user (password pass).
func (c *cnode) tryAPIAs(user, pass, method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+c.web+path, rd)
	req.SetBasicAuth(user, pass)
	req.Header.Set("Content-Type", "application/json")
	hc := http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

// queueLeader asks node c for a quorum queue's leader.
func (c *cnode) queueLeader(t testing.TB, vhostQueue string) string {
	t.Helper()
	var q struct {
		Leader string `json:"leader"`
	}
	if code, err := c.tryAPI("GET", "/api/queues/"+vhostQueue, nil, &q); err != nil || code != 200 {
		return ""
	}
	return q.Leader
}

// eventually polls cond every 50 ms until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dialNode opens an AMQP connection and channel to a node.
func dialNode(t testing.TB, c *cnode) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(c.url())
	if err != nil {
		t.Fatalf("dial %s: %v", c.name, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel on %s: %v", c.name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, ch
}

// setPartition makes each node refuse the cluster traffic of the nodes in
// blocked[node index] (fault injection on the Raft multiplexer).
func setPartition(nodes []*cnode, blocked map[int][]int) error {
	for _, nd := range nodes {
		addrs := []string{}
		for _, j := range blocked[nd.i] {
			addrs = append(addrs, nodes[j].raft)
		}
		code, err := nd.tryAPI("PUT", "/api/cluster/partition", map[string]any{"blocked": addrs}, nil)
		if err == nil && code/100 != 2 {
			err = fmt.Errorf("HTTP %d", code)
		}
		if err != nil {
			return fmt.Errorf("partition on %s: %w", nd.name, err)
		}
	}
	return nil
}
