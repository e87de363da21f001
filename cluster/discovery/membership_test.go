package discovery

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/trident-broker/trident/test/testbin"
)

// fastTimers is memberlist.DefaultLocalConfig with timers short enough for
// a failure to be declared within about a second on loopback.
func fastTimers() *memberlist.Config {
	c := memberlist.DefaultLocalConfig()
	c.ProbeInterval = 100 * time.Millisecond
	c.ProbeTimeout = 50 * time.Millisecond
	c.GossipInterval = 20 * time.Millisecond
	c.PushPullInterval = time.Second
	c.SuspicionMult = 2
	c.TCPTimeout = 500 * time.Millisecond
	c.GossipToTheDeadTime = time.Second
	return c
}

// freePort returns a port free for both TCP and UDP on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := testbin.FreeTCPUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// recorder collects events for a node.
type recorder struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recorder) on(e Event) { r.mu.Lock(); r.evs = append(r.evs, e); r.mu.Unlock() }

func (r *recorder) count(kind EventKind, name string, st Status) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.evs {
		if e.Kind == kind && e.Member.Name == name && e.Member.Status == st {
			n++
		}
	}
	return n
}

// wait reports whether an event of kind for name with status st arrives
// within timeout. Events are delivered from a queue after the member's
// status is recorded, so a status seen by Members may precede its event.
func (r *recorder) wait(kind EventKind, name string, st Status, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for r.count(kind, name, st) == 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

type testNode struct {
	cfg Config
	m   *Membership
	rec *recorder
}

func startNode(t *testing.T, log *slog.Logger, name string, port int, join ...string) *testNode {
	t.Helper()
	n := &testNode{rec: &recorder{}}
	n.cfg = Config{
		NodeName:          name,
		BindAddr:          "127.0.0.1",
		BindPort:          port,
		Join:              join,
		RetryJoinInterval: 200 * time.Millisecond,
		Meta:              map[string]string{"raft": fmt.Sprintf("127.0.0.1:%d", port+1), "amqp": "127.0.0.1:5672"},
		OnEvent:           n.rec.on,
		Memberlist:        fastTimers(),
	}
	var err error
	if n.m, err = Start(n.cfg, log); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitStatus waits until m sees name with status st, and returns how long
// that took.
func waitStatus(t *testing.T, m *Membership, name string, st Status, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		for _, mb := range m.Members() {
			if mb.Name == name && mb.Status == st {
				return time.Since(start)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: %s not %s within %v; members %v", m.Name(), name, st, timeout, m.Members())
	return 0
}

func waitAllAlive(t *testing.T, nodes []*testNode, timeout time.Duration) {
	t.Helper()
	for _, n := range nodes {
		for _, o := range nodes {
			waitStatus(t, n.m, o.cfg.NodeName, StatusAlive, timeout)
		}
	}
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return nil
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Logf("%s", p); return len(p), nil }

// TestThreeNodes: three members join and see each other alive with their
// metadata; one crashes (Shutdown without Leave) and the others declare it
// dead; it restarts under the same name and address and is alive again;
// a metadata change is gossiped; a graceful Leave shows as left.
func TestThreeNodes(t *testing.T) {
	log := testLogger(t)
	ports := []int{freePort(t), freePort(t), freePort(t)}
	seed := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	n0 := startNode(t, log, "node0", ports[0])
	n1 := startNode(t, log, "node1", ports[1], seed)
	n2 := startNode(t, log, "node2", ports[2], seed)
	nodes := []*testNode{n0, n1, n2}
	defer func() {
		for _, n := range nodes {
			n.m.Shutdown()
		}
	}()

	waitAllAlive(t, nodes, 5*time.Second)
	for _, n := range nodes {
		ms := n.m.Members()
		if len(ms) != 3 {
			t.Fatalf("%s sees %d members: %v", n.cfg.NodeName, len(ms), ms)
		}
		for i, mb := range ms {
			want := nodes[i].cfg
			if mb.Name != want.NodeName || mb.Addr != net.JoinHostPort("127.0.0.1", strconv.Itoa(want.BindPort)) ||
				mb.Meta["raft"] != want.Meta["raft"] || mb.Meta["amqp"] != "127.0.0.1:5672" {
				t.Fatalf("%s sees %+v, want name %s port %d meta %v", n.cfg.NodeName, mb, want.NodeName, want.BindPort, want.Meta)
			}
		}
	}

	// Crash node2: the others declare it dead.
	crashed := time.Now()
	if err := n2.m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[:2] {
		waitStatus(t, n.m, "node2", StatusDead, 10*time.Second)
	}
	t.Logf("node2 declared dead by both peers %v after its crash", time.Since(crashed).Round(time.Millisecond))
	if !n0.rec.wait(EventLeave, "node2", StatusDead, time.Second) {
		t.Fatal("node0 got no leave event for node2")
	}

	// Restart node2 under the same name and port.
	n2 = startNode(t, log, "node2", ports[2], seed)
	nodes[2] = n2
	waitAllAlive(t, nodes, 10*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for n0.rec.count(EventJoin, "node2", StatusAlive) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := n0.rec.count(EventJoin, "node2", StatusAlive); c < 2 {
		t.Fatalf("node0 saw node2 join %d times, want 2", c)
	}

	// Metadata update.
	if err := n1.m.SetMeta(map[string]string{"raft": "127.0.0.1:1", "amqp": "127.0.0.1:5673"}, time.Second); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for n0.rec.count(EventUpdate, "node1", StatusAlive) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n0.rec.count(EventUpdate, "node1", StatusAlive) == 0 {
		t.Fatal("node0 got no update event for node1")
	}
	for _, mb := range n0.m.Members() {
		if mb.Name == "node1" && mb.Meta["amqp"] != "127.0.0.1:5673" {
			t.Fatalf("node0 sees node1 meta %v", mb.Meta)
		}
	}

	// Graceful leave of node1.
	if err := n1.m.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, n0.m, "node1", StatusLeft, 5*time.Second)
	waitStatus(t, n2.m, "node1", StatusLeft, 5*time.Second)
	if err := n1.m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := n1.m.Leave(time.Second); err != ErrShutdown {
		t.Fatalf("Leave after Shutdown = %v, want ErrShutdown", err)
	}
}

// TestJoinRetry: a node whose seed is not up yet joins once it is.
func TestJoinRetry(t *testing.T) {
	log := testLogger(t)
	p0, p1 := freePort(t), freePort(t)
	seed := net.JoinHostPort("127.0.0.1", strconv.Itoa(p0))
	n1 := startNode(t, log, "late-joiner", p1, seed) // seed not up yet
	defer n1.m.Shutdown()
	time.Sleep(300 * time.Millisecond)
	n0 := startNode(t, log, "seed", p0)
	defer n0.m.Shutdown()
	waitAllAlive(t, []*testNode{n0, n1}, 10*time.Second)
}

// TestSingleNode: port 0 picks a port; a lone node lists itself; Shutdown
// is idempotent and later calls fail with ErrShutdown.
func TestSingleNode(t *testing.T) {
	m, err := Start(Config{NodeName: "solo", BindAddr: "127.0.0.1", Memberlist: fastTimers(),
		Meta: map[string]string{"amqp": "127.0.0.1:5672"}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	self := m.LocalMember()
	if _, port, _ := net.SplitHostPort(self.Addr); port == "0" || port == "" || self.Status != StatusAlive || self.Meta["amqp"] != "127.0.0.1:5672" {
		t.Fatalf("local member %+v", self)
	}
	if ms := m.Members(); len(ms) != 1 || ms[0].Name != "solo" {
		t.Fatalf("members %v", ms)
	}
	if _, err := Start(Config{NodeName: ""}, nil); err == nil {
		t.Fatal("Start without a name succeeded")
	}
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := m.Leave(time.Second); err != ErrShutdown {
		t.Fatalf("Leave after Shutdown = %v", err)
	}
	if err := m.SetMeta(nil, time.Second); err != ErrShutdown {
		t.Fatalf("SetMeta after Shutdown = %v", err)
	}
	if _, err := m.Join([]string{"127.0.0.1:1"}); err != ErrShutdown {
		t.Fatalf("Join after Shutdown = %v", err)
	}
}

// TestForgetWhenDown: a node asked to forget a member it still sees alive
// (its failure detector is behind the node that took the request) counts
// the member's later failure as a leave on purpose; a member forgotten so
// that joins again is alive and a later failure is a plain failure.
func TestForgetWhenDown(t *testing.T) {
	log := testLogger(t)
	ports := []int{freePort(t), freePort(t)}
	seed := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	n0 := startNode(t, log, "node0", ports[0])
	n1 := startNode(t, log, "node1", ports[1], seed)
	defer func() { _ = n0.m.Shutdown() }()
	waitAllAlive(t, []*testNode{n0, n1}, 5*time.Second)

	if n0.m.ForgetWhenDown("nobody") {
		t.Fatal("ForgetWhenDown of an unknown member reported it known")
	}
	if err := n0.m.Forget("node1"); !errors.Is(err, ErrAlive) {
		t.Fatalf("Forget of an alive member: %v, want ErrAlive", err)
	}
	if !n0.m.ForgetWhenDown("node1") {
		t.Fatal("ForgetWhenDown of a known member reported it unknown")
	}
	waitStatus(t, n0.m, "node1", StatusAlive, time.Second)
	if err := n1.m.Shutdown(); err != nil { // a crash: no leave announced
		t.Fatal(err)
	}
	waitStatus(t, n0.m, "node1", StatusLeft, 10*time.Second)
	if !n0.rec.wait(EventLeave, "node1", StatusLeft, time.Second) {
		t.Fatal("no leave event for the forgotten member")
	}

	// It comes back: alive, and the forget no longer holds.
	n1 = startNode(t, log, "node1", ports[1], seed)
	waitStatus(t, n0.m, "node1", StatusAlive, 10*time.Second)
	if err := n1.m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, n0.m, "node1", StatusDead, 10*time.Second)
}
