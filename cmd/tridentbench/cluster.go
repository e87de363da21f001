package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trident-broker/trident/test/testbin"
)

// The cluster target (--cluster3) is three trident processes on loopback
// that the bench starts itself, as test/cluster_harness_test.go does: each
// node has its own AMQP, HTTP, gossip and Raft ports and data directory,
// they find each other by gossip and form the metadata Raft group once all
// three are up (--cluster-bootstrap-expect 3). Only scenarios that say
// OnCluster run against it (the quorum queue ones).
//
// A quorum queue's leader is whichever member Raft elects, so the clients
// are placed once it is known (asked of every node's /api/queues until all
// agree), by --cluster-clients:
//
//	followers  publishers and consumers on the two followers, publisher i on
//	           follower i%2 and consumer i on follower (i+1)%2: 1 → 1 has its
//	           publisher on one follower and its consumer on the other, so
//	           every message is forwarded to the leader and back out
//	spread     publisher i on node i%3 and consumer i on node (i+1)%3 in name
//	           order, leader included, as a load balancer would
//	leader     every client on the leader: replication without forwarding

// clusterSize is the number of nodes of the cluster target.
const clusterSize = 3

// clusterTargetName is the cluster target's name in the report.
const clusterTargetName = "trident-3node"

// placements are --cluster-clients' values.
var placements = []string{"followers", "spread", "leader"}

type clusterNode struct {
	name, gossip, raft, web string
	p                       *testbin.Proc
}

// localCluster is the running cluster target.
type localCluster struct {
	nodes     []*clusterNode
	placement string
}

// startCluster launches the nodes one after the other (a node listens on
// AMQP before its cluster has formed) and waits until each sees all of
// them running. pprof, if not empty, is host:port for node 0's
// TRIDENT_PPROF; node i gets port+i. On error the nodes started are
// stopped.
func startCluster(ctx context.Context, bin, placement, pprof string) (c *localCluster, err error) {
	return startClusterWith(ctx, bin, placement, pprof, nil)
}

// startClusterWith is startCluster with extra(i)'s arguments for node i
// (nil: none).
func startClusterWith(ctx context.Context, bin, placement, pprof string, extra func(i int) []string) (c *localCluster, err error) {
	var pprofHost string
	var pprofPort int
	if pprof != "" {
		h, p, err := net.SplitHostPort(pprof)
		if err == nil {
			pprofPort, err = strconv.Atoi(p)
		}
		if err != nil {
			return nil, fmt.Errorf("--cluster-pprof %q: want host:port", pprof)
		}
		pprofHost = h
	}
	c = &localCluster{placement: placement}
	defer func() {
		if err != nil {
			c.stop()
			c = nil
		}
	}()
	cookie := randomSuffix()
	for i := 0; i < clusterSize; i++ {
		gp, err := freeTCPUDPPort()
		if err != nil {
			return c, err
		}
		rp, err := testbin.FreePort()
		if err != nil {
			return c, err
		}
		hp, err := testbin.FreePort()
		if err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, &clusterNode{
			name:   fmt.Sprintf("n%d", i),
			gossip: net.JoinHostPort("127.0.0.1", strconv.Itoa(gp)),
			raft:   net.JoinHostPort("127.0.0.1", strconv.Itoa(rp)),
			web:    net.JoinHostPort("127.0.0.1", strconv.Itoa(hp)),
		})
	}
	// The nodes inherit this process's environment when they start; each
	// gets its own TRIDENT_PPROF, or none.
	oldPprof, hadPprof := os.LookupEnv("TRIDENT_PPROF")
	defer func() {
		if hadPprof {
			os.Setenv("TRIDENT_PPROF", oldPprof)
		} else {
			os.Unsetenv("TRIDENT_PPROF")
		}
	}()
	for i, nd := range c.nodes {
		var seeds []string
		for _, o := range c.nodes {
			if o != nd {
				seeds = append(seeds, o.gossip)
			}
		}
		os.Unsetenv("TRIDENT_PPROF")
		if pprofHost != "" {
			os.Setenv("TRIDENT_PPROF", net.JoinHostPort(pprofHost, strconv.Itoa(pprofPort+i)))
		}
		args := []string{"--http-listen", nd.web, "--cluster-node-name", nd.name,
			"--cluster-gossip-listen", nd.gossip, "--cluster-raft-listen", nd.raft,
			"--cluster-bootstrap-expect", strconv.Itoa(clusterSize), "--cluster-cookie", cookie,
			"--join", strings.Join(seeds, ",")}
		if extra != nil {
			args = append(args, extra(i)...)
		}
		nd.p, err = testbin.Launch(ctx, testbin.Options{Binary: bin, ExtraArgs: args})
		if err != nil {
			return c, fmt.Errorf("start cluster node %s: %w", nd.name, err)
		}
		fmt.Fprintf(os.Stderr, "tridentbench: cluster node %s: amqp %s, http %s (log %s)\n", nd.name, nd.p.AMQPAddr, nd.web, nd.p.LogPath)
	}
	for _, nd := range c.nodes {
		if err := c.waitFormed(ctx, nd, 60*time.Second); err != nil {
			return c, err
		}
	}
	return c, nil
}

// stop stops every node that started and removes their directories.
func (c *localCluster) stop() {
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		if nd.p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if nd.p.Running() {
				if err := nd.p.Stop(); err != nil {
					fmt.Fprintf(os.Stderr, "tridentbench: stop cluster node %s: %v\n", nd.name, err)
				}
			}
			nd.p.Cleanup()
		}()
	}
	wg.Wait()
}

// waitFormed polls nd's /api/nodes until it lists every node running.
func (c *localCluster) waitFormed(ctx context.Context, nd *clusterNode, timeout time.Duration) error {
	var want []string
	for _, o := range c.nodes {
		want = append(want, o.name)
	}
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		var list []struct {
			Name    string `json:"name"`
			Running bool   `json:"running"`
		}
		err := getJSON(ctx, nd.web, "/api/nodes", &list)
		if err == nil {
			var running []string
			for _, m := range list {
				if m.Running {
					running = append(running, m.Name)
				}
			}
			sort.Strings(running)
			if strings.Join(running, ",") == strings.Join(want, ",") {
				return nil
			}
			last = "running: " + strings.Join(running, ",")
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster node %s did not see all %d nodes within %v (%s)", nd.name, clusterSize, timeout, last)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// leader waits until every node names the same leader for queue (in vhost
// "/"), which also means every node has the queue, and returns its index.
func (c *localCluster) leader(ctx context.Context, queue string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	path := "/api/queues/%2F/" + url.PathEscape(queue)
	for {
		names := make([]string, len(c.nodes))
		for i, nd := range c.nodes {
			var q struct {
				Leader string `json:"leader"`
			}
			if err := getJSON(ctx, nd.web, path, &q); err == nil {
				names[i] = q.Leader
			}
		}
		agree := names[0] != ""
		for _, n := range names {
			agree = agree && n == names[0]
		}
		if agree {
			for i, nd := range c.nodes {
				if nd.name == names[0] {
					return i, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("queue %s: nodes do not agree on a leader within %v (they say %q)", queue, timeout, names)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return -1, err
		}
	}
}

// place implements layout.place for the cluster: see the comment at the
// top of this file.
func (c *localCluster) place(ctx context.Context, queue string, pubs, cons int) ([]string, []string, string, error) {
	li, err := c.leader(ctx, queue, 20*time.Second)
	if err != nil {
		return nil, nil, "", err
	}
	var on []*clusterNode
	switch c.placement {
	case "followers":
		for i, nd := range c.nodes {
			if i != li {
				on = append(on, nd)
			}
		}
	case "spread":
		on = c.nodes
	case "leader":
		on = []*clusterNode{c.nodes[li]}
	default:
		return nil, nil, "", fmt.Errorf("unknown placement %q", c.placement)
	}
	count := map[string][2]int{}
	pubURLs := make([]string, pubs)
	for i := range pubURLs {
		nd := on[i%len(on)]
		pubURLs[i] = nd.p.AMQPURL
		n := count[nd.name]
		n[0]++
		count[nd.name] = n
	}
	consURLs := make([]string, cons)
	for i := range consURLs {
		nd := on[(i+1)%len(on)]
		consURLs[i] = nd.p.AMQPURL
		n := count[nd.name]
		n[1]++
		count[nd.name] = n
	}
	parts := []string{"leader " + c.nodes[li].name}
	for _, nd := range c.nodes {
		if n, ok := count[nd.name]; ok {
			parts = append(parts, fmt.Sprintf("%s %dp/%dc", nd.name, n[0], n[1]))
		}
	}
	return pubURLs, consURLs, strings.Join(parts, ", "), nil
}

// getJSON GETs http://addr+path as guest and decodes the JSON answer.
func getJSON(ctx context.Context, addr, path string, out any) error {
	return getJSONTimeout(ctx, addr, path, out, 2*time.Second)
}

// getJSONTimeout is getJSON with a deadline of d.
func getJSONTimeout(ctx context.Context, addr, path string, out any, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// freeTCPUDPPort returns a loopback port free for both TCP and UDP a moment
// ago: memberlist gossips over both on the same port.
func freeTCPUDPPort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free TCP and UDP port on 127.0.0.1")
}
