package test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

// Issue 38, F1 and F9: cluster membership is authenticated, always. A
// node started with clustering and no cookie generates one into its data
// directory (as RabbitMQ's Erlang cookie), so an outsider that joins its
// gossip with no cookie of its own is never let into the metadata group:
// it gets no users, its API cannot create users the cluster accepts, and
// it is never placed as a member of a quorum queue.

// launchClusterNode starts one clustered node named name with its data
// in dataDir, its own HTTP, gossip and Raft ports, and args (no cookie
// unless args give one).
func launchClusterNode(t *testing.T, name, dataDir string, args ...string) *cnode {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	bin, err := testbin.Binary()
	if err != nil {
		t.Fatal(err)
	}
	hp, _ := testbin.FreePort()
	rp, _ := testbin.FreePort()
	nd := &cnode{name: name, gossip: net.JoinHostPort("127.0.0.1", strconv.Itoa(freeTCPUDPPort(t))),
		raft: net.JoinHostPort("127.0.0.1", strconv.Itoa(rp)), web: net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))}
	all := append([]string{"--http-listen", nd.web, "--cluster-node-name", name,
		"--cluster-gossip-listen", nd.gossip, "--cluster-raft-listen", nd.raft}, args...)
	p, err := testbin.Launch(context.Background(), testbin.Options{Binary: bin, DataDir: dataDir, ExtraArgs: all})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	nd.p = p
	t.Cleanup(func() {
		if t.Failed() && p.LogPath != "" {
			if b, err := os.ReadFile(p.LogPath); err == nil {
				if len(b) > 5000 {
					b = b[len(b)-5000:]
				}
				t.Logf("tail of %s's log:\n%s", name, b)
			}
		}
		p.Cleanup()
	})
	return nd
}

// logHas reports whether a line of nd's log holds every one of parts.
func logHas(nd *cnode, parts ...string) bool {
	b, err := os.ReadFile(nd.p.LogPath)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

// nodeNames is the names /api/nodes of nd lists, sorted.
func nodeNames(t *testing.T, nd *cnode) string {
	t.Helper()
	var ms []struct {
		Name string `json:"name"`
	}
	nd.api(t, "GET", "/api/nodes", nil, &ms)
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	return strings.Join(names, ",")
}

// whoami is the status of GET /api/whoami on nd as user:pass.
func whoami(t *testing.T, nd *cnode, user, pass string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+nd.web+"/api/whoami", nil)
	req.SetBasicAuth(user, pass)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("whoami on %s: %v", nd.name, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// amqpLogin reports whether user:pass opens an AMQP connection to nd.
func amqpLogin(nd *cnode, user, pass string) error {
	u := "amqp://" + url.UserPassword(user, pass).String() + "@" + nd.p.AMQPAddr + "/"
	c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	return c.Close()
}

// TestSecurityF1ClusterNoCookie: node A with clustering and no cookie
// configured generates one (mode 0600 in its data directory); outsider B,
// also without a cookie, joins A's gossip with --join A and is refused on
// both sides: it never becomes a member of A's metadata group (A's
// /api/nodes lists A alone), a user created on A cannot log in on B, an
// administrator made on B cannot log in on A. Node C given A's cookie
// file joins A's cluster and gets A's users.
func TestSecurityF1ClusterNoCookie(t *testing.T) {
	dirA := filepath.Join(t.TempDir(), "data")
	a := launchClusterNode(t, "a@localhost", dirA)
	eventually(t, 30*time.Second, "a's metadata group to lead alone", func() bool {
		return metaLeaderName(a) == a.name
	})
	cookieFile := filepath.Join(dirA, "cluster.cookie")
	fi, err := os.Stat(cookieFile)
	if err != nil {
		t.Fatalf("no generated cookie file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("cookie file mode %v, want 0600", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(cookieFile); len(strings.TrimSpace(string(b))) < 43 {
		t.Fatalf("cookie %q: shorter than 32 random bytes encoded", b)
	}
	if code := a.api(t, "PUT", "/api/users/alice", map[string]any{"password": "alice-pw", "tags": "management"}, nil); code/100 != 2 {
		t.Fatalf("create alice on a: %d", code)
	}
	a.api(t, "PUT", "/api/permissions/%2F/alice", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil)
	if err := amqpLogin(a, "alice", "alice-pw"); err != nil {
		t.Fatalf("alice on a: %v", err)
	}

	b := launchClusterNode(t, "b@localhost", filepath.Join(t.TempDir(), "data"), "--join", a.gossip)
	// Both sides say who was refused and why.
	eventually(t, 30*time.Second, "a to log that it did not add b", func() bool {
		return logHas(a, "member not added", b.name)
	})
	eventually(t, 30*time.Second, "b to log a's refused connection", func() bool {
		return logHas(b, "did not prove the cluster cookie")
	})
	time.Sleep(6 * time.Second) // three reconcile rounds of a's leader
	if got := nodeNames(t, a); got != a.name {
		t.Fatalf("a's /api/nodes lists %q, want a alone", got)
	}
	if got := nodeNames(t, b); got != b.name {
		t.Fatalf("b's /api/nodes lists %q, want b alone", got)
	}
	if err := amqpLogin(b, "alice", "alice-pw"); err == nil {
		t.Fatal("a user created on a logs in on b: b has a's users")
	}
	if code := whoami(t, b, "alice", "alice-pw"); code != http.StatusUnauthorized {
		t.Fatalf("alice on b's API: %d, want 401", code)
	}
	// b may or may not manage to create a user on its own; a never has it.
	_, _ = b.tryAPI("PUT", "/api/users/mallory", map[string]any{"password": "mallory-pw", "tags": "administrator"}, nil)
	time.Sleep(2 * time.Second)
	if code := whoami(t, a, "mallory", "mallory-pw"); code != http.StatusUnauthorized {
		t.Fatalf("an administrator created on b: %d on a, want 401", code)
	}
	if code, _ := a.tryAPI("GET", "/api/users/mallory", nil, nil); code != http.StatusNotFound {
		t.Fatalf("GET /api/users/mallory on a: %d, want 404", code)
	}

	// The same cookie file: C joins a's cluster and has a's users.
	c := launchClusterNode(t, "c@localhost", filepath.Join(t.TempDir(), "data"),
		"--cluster-cookie-file", cookieFile, "--join", a.gossip)
	waitNodes(t, a.web, a.name+"=true,"+c.name+"=true", 30*time.Second)
	eventually(t, 20*time.Second, "alice to log in on c", func() bool {
		return amqpLogin(c, "alice", "alice-pw") == nil
	})
	if got := nodeNames(t, a); strings.Contains(got, b.name) {
		t.Fatalf("a's /api/nodes lists b: %q", got)
	}
}

// TestSecurityF9WrongCookieNotMember: two nodes with one cookie form a
// cluster; a third node in the same gossip ring has another cookie. A
// quorum queue declared for three members (and one with the default
// size) is declared at once on the two good nodes and confirms
// publishes; its members never include the third node.
func TestSecurityF9WrongCookieNotMember(t *testing.T) {
	nodes := startCluster(t, 2)
	_, rogueWeb := launchJoiner(t, "rogue@localhost", nodes[0], "--cluster-cookie", "not-the-cookie")
	rogue := &cnode{name: "rogue@localhost", web: rogueWeb}
	eventually(t, 30*time.Second, "the rogue node in the gossip ring, refused", func() bool {
		return logHas(nodes[0], "member not added", rogue.name) || logHas(nodes[1], "member not added", rogue.name)
	})
	_, ch := dialNode(t, nodes[0])
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		name string
		args amqp.Table
	}{
		{"f9-qq3", amqp.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}},
		{"f9-qq", amqp.Table{"x-queue-type": "quorum"}},
	} {
		start := time.Now()
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			t.Fatalf("declare %s with a wrong-cookie node in the gossip ring: %v (after %v)", q.name, err, time.Since(start))
		}
		t.Logf("%s declared in %v", q.name, time.Since(start).Round(time.Millisecond))
		if err := confirmOne(ch, q.name, 10*time.Second); err != nil {
			t.Fatalf("publish to %s: %v", q.name, err)
		}
	}
	deadline := time.Now().Add(6 * time.Second) // a few reconcile rounds: no growth onto the rogue
	for time.Now().Before(deadline) {
		for _, nd := range nodes {
			for _, q := range []string{"f9-qq3", "f9-qq"} {
				var j struct {
					Members []string `json:"members"`
				}
				nd.api(t, "GET", "/api/queues/%2F/"+q, nil, &j)
				for _, m := range j.Members {
					if m == rogue.name {
						t.Fatalf("%s on %s: members %v include the node with the wrong cookie", q, nd.name, j.Members)
					}
				}
				if len(j.Members) != 2 {
					t.Fatalf("%s on %s: members %v, want the two good nodes", q, nd.name, j.Members)
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if code, _ := rogue.tryAPI("GET", "/api/queues/%2F/f9-qq", nil, nil); code == http.StatusOK {
		t.Fatal("the node with the wrong cookie has the cluster's queues")
	}
}
