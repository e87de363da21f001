package test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/cluster/discovery/dnstest"
	"github.com/trident-broker/trident/test/testbin"
)

// Issue 39, item 3: peer discovery through DNS. Nodes are started with
// no --join at all; a real DNS server in the test (dnstest) publishes
// their addresses as a Kubernetes headless service does, and changes its
// answers while they start.

// dnsNode starts one trident process that finds its seeds through DNS
// only: the discovery flags come in args.
// dir holds its data (made before the cleanup that stops the nodes is
// registered, so that it is removed after they stop).
func dnsNode(t *testing.T, dir string, i int, gossip string, expect int, args ...string) *cnode {
	t.Helper()
	bin, err := testbin.Binary()
	if err != nil {
		t.Fatal(err)
	}
	hp, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(gossip)
	nd := &cnode{i: i, name: fmt.Sprintf("trident-%d@localhost", i), gossip: gossip,
		web: net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))}
	all := append([]string{"--http-listen", nd.web, "--cluster-node-name", nd.name,
		"--cluster-gossip-listen", gossip, "--cluster-raft-listen", net.JoinHostPort(host, "0"),
		"--cluster-bootstrap-expect", strconv.Itoa(expect), "--cluster-cookie", "test-cookie",
		"--cluster-failure-detection", "fast"}, args...)
	data := filepath.Join(dir, strconv.Itoa(i), "data")
	if err := os.MkdirAll(filepath.Dir(data), 0o755); err != nil {
		t.Fatal(err)
	}
	nd.p, err = testbin.Launch(context.Background(), testbin.Options{Binary: bin,
		DataDir: data, ExtraArgs: all})
	if err != nil {
		t.Fatalf("start %s: %v", nd.name, err)
	}
	return nd
}

// stopDNSNodes stops the nodes one at a time (as startClusterWith's
// cleanup does: with two left, the one not leading the metadata group
// goes first) and shows the logs of a failed test.
func stopDNSNodes(t *testing.T, nodes []*cnode) {
	stopNodesInTurn(t, nodes)
	for _, nd := range nodes {
		if nd == nil {
			continue
		}
		if t.Failed() && nd.p.LogPath != "" {
			if b, err := os.ReadFile(nd.p.LogPath); err == nil {
				if len(b) > 5000 {
					b = b[len(b)-5000:]
				}
				t.Logf("tail of %s's log:\n%s", nd.name, b)
			}
		}
		nd.p.Cleanup()
	}
}

// commonGossipPort is a port free for TCP and UDP on every one of ips.
func commonGossipPort(t *testing.T, ips ...string) int {
	t.Helper()
	for range 50 {
		p := freeTCPUDPPort(t)
		ok := true
		for _, ip := range ips {
			a := net.JoinHostPort(ip, strconv.Itoa(p))
			l, err := net.Listen("tcp", a)
			if err != nil {
				ok = false
				break
			}
			u, err := net.ListenPacket("udp", a)
			l.Close()
			if err != nil {
				ok = false
				break
			}
			u.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no gossip port free on every loopback address")
	return 0
}

func viewOf(nodes ...*cnode) string {
	var parts []string
	for _, nd := range nodes {
		parts = append(parts, nd.name+"=true")
	}
	return strings.Join(parts, ",")
}

// TestOpsDNSDiscovery: three nodes on 127.0.0.2-4 with one gossip port,
// bootstrap_expect 3 and cluster.discovery.dns_name, no --join. The name
// is NXDOMAIN while they start (each keeps asking), then gets their
// addresses one by one: they form one cluster, and each node's
// /api/nodes lists the three. A fourth node started later on 127.0.0.5,
// whose address DNS publishes only after it has joined, joins it, and
// so does a fifth started with bootstrap_expect 0.
func TestOpsDNSDiscovery(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	srv := dnstest.New(t)
	const name = "trident.default.svc.cluster.test"
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}
	port := strconv.Itoa(commonGossipPort(t, ips...))
	flags := []string{"--cluster-discovery-dns-name", name, "--cluster-discovery-dns-server", srv.Addr,
		"--cluster-discovery-interval", "200ms", "--cluster-discovery-settled-interval", "1s"}

	dir := t.TempDir()
	nodes := make([]*cnode, 5)
	t.Cleanup(func() { stopDNSNodes(t, nodes) })
	for i := range 3 {
		nodes[i] = dnsNode(t, dir, i, net.JoinHostPort(ips[i], port), 3, flags...)
	}
	// Nobody in DNS yet: each node asks again and again, and waits.
	eventually(t, 10*time.Second, "the nodes to ask DNS again", func() bool { return srv.Queries(name) >= 12 })
	for _, nd := range nodes[:3] {
		if l, err := fetchClusterNodes(nd.web); err == nil && len(l) > 1 {
			t.Fatalf("%s lists %s with no seed", nd.name, nodesView(l))
		}
	}
	srv.SetAddrs(name, ips[0])
	srv.SetAddrs(name, ips[0], ips[1])
	srv.SetAddrs(name, ips[:3]...)
	for _, nd := range nodes[:3] {
		waitNodes(t, nd.web, viewOf(nodes[:3]...), 60*time.Second)
	}
	// The cluster works as one: a queue declared on node 0 is known on
	// node 2.
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare("dns-formed", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the queue on node 2", func() bool {
		code, _ := nodes[2].tryAPI("GET", "/api/queues/%2F/dns-formed", nil, nil)
		return code == 200
	})

	// A node started later, as a pod that DNS publishes only once it is
	// ready: it finds the others through the name and joins the cluster
	// while its own address is not in DNS yet; published, it stays one
	// member.
	nodes[3] = dnsNode(t, dir, 3, net.JoinHostPort(ips[3], port), 3, flags...)
	for _, nd := range nodes[:4] {
		waitNodes(t, nd.web, viewOf(nodes[:4]...), 60*time.Second)
	}
	srv.SetAddrs(name, ips[:4]...)
	// One more with bootstrap_expect 0: with discovery it waits to be
	// added to the cluster it finds (as with --join), rather than found
	// a cluster of its own.
	nodes[4] = dnsNode(t, dir, 4, net.JoinHostPort(ips[4], port), 0, flags...)
	for _, nd := range nodes {
		waitNodes(t, nd.web, viewOf(nodes...), 60*time.Second)
	}
	// The listing alone does not tell whether it first founded a group of
	// its own (seen in a run without discovery counting as seeds): its
	// log does.
	if b, err := os.ReadFile(nodes[4].p.LogPath); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(string(b), "waits to be added by the cluster's leader") || strings.Contains(string(b), "bootstrapped alone") {
		t.Errorf("node 4 did not wait to be added:\n%s", b)
	}
	srv.SetAddrs(name, ips...)
	q := srv.Queries(name)
	eventually(t, 10*time.Second, "the nodes to resolve the name again", func() bool { return srv.Queries(name) >= q+8 })
	for _, nd := range nodes {
		waitNodes(t, nd.web, viewOf(nodes...), 10*time.Second)
	}
}

// TestOpsDNSDiscoverySRV: three nodes on 127.0.0.1, each on its own
// gossip port, find each other through SRV records (a headless
// service's named port), published one by one while they run.
func TestOpsDNSDiscoverySRV(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	srv := dnstest.New(t)
	const name = "_gossip._tcp.trident.default.svc.cluster.test"
	flags := []string{"--cluster-discovery-srv", name, "--cluster-discovery-dns-server", srv.Addr,
		"--cluster-discovery-interval", "200ms", "--cluster-discovery-settled-interval", "1s"}
	dir := t.TempDir()
	nodes := make([]*cnode, 3)
	t.Cleanup(func() { stopDNSNodes(t, nodes) })
	var recs []dnstest.SRV
	for i := range nodes {
		p := freeTCPUDPPort(t)
		nodes[i] = dnsNode(t, dir, i, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), 3, flags...)
		target := fmt.Sprintf("trident-%d.trident.default.svc.cluster.test", i)
		srv.SetAddrs(target, "127.0.0.1")
		recs = append(recs, dnstest.SRV{Target: target, Port: uint16(p)})
		srv.SetSRV(name, recs...)
	}
	for _, nd := range nodes {
		waitNodes(t, nd.web, viewOf(nodes...), 60*time.Second)
	}
}
