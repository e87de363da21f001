package test

import (
	"context"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A rolling restart (issue 39 item 5): 3 nodes, a quorum queue, a
// publisher with confirms on one node that reconnects to the next node
// when its node goes away and republishes what was not confirmed. Each
// node in turn gets SIGTERM (it hands its leaderships over first), stays
// down a few seconds and starts again; the next waits until no quorum
// queue depends on it. No confirmed message may be lost, and none may be
// nacked.
// The longest time without a confirm around each restart is logged (the
// issue's goal is 1 s; asserted is only a bound that machine noise does
// not reach).

// rollingPublisher publishes ids 0, 1, 2, ... as persistent messages.
type rollingPublisher struct {
	nodes []*cnode
	queue string

	mu        sync.Mutex
	acks      []time.Time // when each confirm (ack) arrived, in order
	confirmed map[int]bool
	// confirmedAt and via are when each id was confirmed and through
	// which node, to place a loss in the restarts.
	confirmedAt map[int]time.Time
	via         map[int]string
	nacks       []time.Time // when each nack arrived
	sessions    []string    // the node of each connection, in order

	stop chan struct{}
	done chan struct{}
}

// leaseLost returns the first line of a node's log saying that a Raft
// leader stepped down for want of a majority's answers within its lease
// (a stalled process or machine), or "".
func leaseLost(nodes []*cnode) string {
	for _, nd := range nodes {
		b, err := os.ReadFile(nd.p.LogPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "failed to contact quorum of nodes, stepping down") {
				return nd.name + ": " + line
			}
		}
	}
	return ""
}

// restart is one node's stop and start in a rolling restart.
type restart struct {
	node       string
	wasLeader  bool
	from, upAt time.Time
}

// rollingWindow bounds the publishes awaiting a confirm.
const rollingWindow = 64

func startRollingPublisher(nodes []*cnode, queue string, first int) *rollingPublisher {
	p := &rollingPublisher{nodes: nodes, queue: queue, confirmed: map[int]bool{},
		confirmedAt: map[int]time.Time{}, via: map[int]string{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go p.run(first)
	return p
}

func (p *rollingPublisher) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

func (p *rollingPublisher) run(node int) {
	defer close(p.done)
	var pending []int // not confirmed by a lost connection: published again first
	next := 0
	for {
		if p.stopped() && len(pending) == 0 {
			return
		}
		nd := p.nodes[node]
		node = (node + 1) % len(p.nodes) // the node restarted next: it always publishes through the node that stops
		conn, err := amqp.DialConfig(nd.url(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		p.sessions = append(p.sessions, nd.name)
		p.mu.Unlock()
		pending, next = p.session(conn, nd.name, pending, next)
		conn.Close()
	}
}

// session publishes on conn until it fails or the publisher stops; it
// returns the ids to publish again and the next new id.
func (p *rollingPublisher) session(conn *amqp.Connection, node string, pending []int, next int) ([]int, int) {
	outstanding := map[uint64]int{}
	lost := func() []int {
		out := append([]int(nil), pending...)
		for _, id := range outstanding {
			out = append(out, id)
		}
		sort.Ints(out)
		return out
	}
	ch, err := conn.Channel()
	if err != nil {
		return lost(), next
	}
	if err := ch.Confirm(false); err != nil {
		return lost(), next
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, rollingWindow*2))
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	tag := uint64(0)
	handle := func(c amqp.Confirmation) {
		id, ok := outstanding[c.DeliveryTag]
		if !ok {
			return
		}
		delete(outstanding, c.DeliveryTag)
		p.mu.Lock()
		defer p.mu.Unlock()
		if c.Ack {
			p.confirmed[id] = true
			p.confirmedAt[id], p.via[id] = time.Now(), node
			p.acks = append(p.acks, time.Now())
		} else {
			p.nacks = append(p.nacks, time.Now())
		}
	}
	tick := time.NewTicker(2 * time.Millisecond) // about 500 publishes a second
	defer tick.Stop()
	for {
		stopping := p.stopped()
		if stopping && len(pending) == 0 && len(outstanding) == 0 {
			return nil, next
		}
		var wantPublish <-chan time.Time
		if len(outstanding) < rollingWindow && (len(pending) > 0 || !stopping) {
			wantPublish = tick.C
		}
		select {
		case c, ok := <-confirms:
			if !ok {
				return lost(), next
			}
			handle(c)
		case <-closed:
			for drained := false; !drained; { // those that arrived before the close
				select {
				case c, ok := <-confirms:
					if !ok {
						drained = true
						break
					}
					handle(c)
				case <-time.After(time.Second):
					drained = true
				}
			}
			return lost(), next
		case <-wantPublish:
			id := next
			if len(pending) > 0 {
				id, pending = pending[0], pending[1:]
			} else {
				next++
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := ch.PublishWithContext(ctx, "", p.queue, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(id))})
			cancel()
			tag++
			outstanding[tag] = id
			if err != nil {
				return lost(), next
			}
		}
	}
}

// finish stops publishing and waits for the last confirms (or gives up
// on them: what is not confirmed is not counted).
func (p *rollingPublisher) finish(t *testing.T) {
	close(p.stop)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Error("the publisher did not finish within 60 s of stopping")
	}
}

// nacksIn counts the nacks that arrived in [from, to].
func (p *rollingPublisher) nacksIn(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.nacks {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// maxGap is the longest time without a confirm that overlaps [from, to].
func (p *rollingPublisher) maxGap(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(p.acks); i++ {
		a, b := p.acks[i-1], p.acks[i]
		if b.Before(from) || a.After(to) {
			continue
		}
		gap = max(gap, b.Sub(a))
	}
	return gap
}

func TestRollingRestartNoLoss(t *testing.T) {
	nodes := startCluster(t, 3)
	const queue = "rolling-q"
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a leader for "+queue, func() bool { return nodes[0].queueLeader(t, "%2F/"+queue) != "" })

	pub := startRollingPublisher(nodes, queue, 0)
	count := func() int {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		return len(pub.confirmed)
	}
	eventually(t, 30*time.Second, "the first confirms", func() bool { return count() >= 200 })

	var restarts []restart
	for _, nd := range nodes {
		// As RabbitMQ's procedure: the queue has all its members again
		// (a node that left is added back some time after it rejoins)
		// and no quorum queue depends on the node about to stop. The
		// health check counts a member that has not caught up with the
		// leader's log (one just added back) as offline, so passing it
		// is what says the members have caught up: nothing else waits.
		settle := time.Now()
		eventually(t, 90*time.Second, queue+" to have 3 members", func() bool {
			var q struct {
				Members []string `json:"members"`
			}
			code, err := nodes[(nd.i+1)%3].tryAPI("GET", "/api/queues/%2F/"+queue, nil, &q)
			return err == nil && code == 200 && len(q.Members) == 3
		})
		members := time.Now()
		eventually(t, 90*time.Second, nd.name+" not quorum critical", func() bool {
			code, _ := nd.tryAPI("GET", "/api/health/checks/node-is-quorum-critical", nil, nil)
			return code == 200
		})
		t.Logf("before stopping %s: waited %v for the queue's members, then %v for the check", nd.name,
			members.Sub(settle).Round(time.Second), time.Since(members).Round(100*time.Millisecond))
		r := restart{node: nd.name, wasLeader: nodes[(nd.i+1)%3].queueLeader(t, "%2F/"+queue) == nd.name, from: time.Now()}
		if err := nd.p.Stop(); err != nil { // SIGTERM
			t.Fatalf("stop %s: %v", nd.name, err)
		}
		time.Sleep(3 * time.Second)
		if err := nd.p.Restart(); err != nil {
			t.Fatalf("start %s: %v", nd.name, err)
		}
		var want []string
		for _, o := range nodes {
			want = append(want, o.name+"=true")
		}
		for _, o := range nodes {
			waitNodes(t, o.web, joinSorted(want), 60*time.Second)
		}
		r.upAt = time.Now()
		restarts = append(restarts, r)
		before := count()
		eventually(t, 60*time.Second, "confirms after "+nd.name+" restarted", func() bool { return count() > before+100 })
	}
	pub.finish(t)

	pub.mu.Lock()
	confirmed, nacks, sessions := len(pub.confirmed), len(pub.nacks), pub.sessions
	pub.mu.Unlock()
	for _, r := range restarts {
		gap := pub.maxGap(r.from, r.upAt)
		t.Logf("restart of %s (led %s: %v): longest time without a confirm %v, %d nacks (down %v in all)",
			r.node, queue, r.wasLeader, gap.Round(time.Millisecond), pub.nacksIn(r.from, r.upAt), r.upAt.Sub(r.from).Round(time.Millisecond))
		if gap > 10*time.Second {
			t.Errorf("restart of %s: no confirm for %v", r.node, gap)
		}
	}
	t.Logf("published and confirmed %d messages, %d nacks, %d connections (%v)", confirmed, nacks, len(sessions), sessions)
	// No nack at all: a hand-over's ops that the old leader's quorum log
	// never appended (raft.ErrLeadershipTransferInProgress, then
	// ErrNotLeader) go to the new leader (cluster/quorum.NotAppendedError,
	// cluster/forward keepUnsent) instead of being nacked.
	// Unless the machine stalled: a leader that hears from no majority
	// for its lease (900 ms) steps down, and what it had appended but not
	// committed has an unknown outcome, which must be nacked. The logs
	// say when that happened; only then are nacks let through (said so),
	// and the loss check below holds either way.
	if nacks > 0 {
		if why := leaseLost(nodes); why != "" {
			t.Logf("%d of %d publishes nacked: a Raft leader lost its lease, not a hand-over (%s)", nacks, confirmed, why)
		} else {
			t.Errorf("%d of %d publishes nacked during the rolling restart, want none", nacks, confirmed)
		}
	}

	// Every confirmed message is in the queue (a republished one may be
	// there twice).
	pub.mu.Lock()
	want := len(pub.confirmed)
	pub.mu.Unlock()
	pub.checkAllInQueue(t, nodes, queue, restarts, want)
}

// checkAllInQueue consumes queue through nodes[1] until every id
// confirmed to the publisher has come (each counted once; duplicates of
// a republish are acked and ignored), or fails naming what did not come:
// the ids' ranges, when and through which node they were confirmed, and
// every node's view of the queue.
func (p *rollingPublisher) checkAllInQueue(t *testing.T, nodes []*cnode, queue string, restarts []restart, want int) {
	t.Helper()
	_, ch := dialNode(t, nodes[1])
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	confirmed := p.confirmed
	p.mu.Unlock()
	seen := map[int]bool{}
	missing, received := want, 0
	var lastAt time.Time
	deadline := time.After(120 * time.Second)
	for missing > 0 {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("the consumer's channel closed")
			}
			id, err := strconv.Atoi(string(m.Body))
			if err != nil {
				t.Fatalf("unexpected body %q", m.Body)
			}
			if confirmed[id] && !seen[id] {
				missing--
			}
			seen[id] = true
			received, lastAt = received+1, time.Now()
			_ = m.Ack(false)
		case <-deadline:
			t.Errorf("%d of %d confirmed messages are not in the queue (%d deliveries, the last at %s)",
				missing, want, received, lastAt.Format("15:04:05.000"))
			var ids []int
			for id := range confirmed {
				if !seen[id] {
					ids = append(ids, id)
				}
			}
			sort.Ints(ids)
			p.mu.Lock()
			for i := 0; i < len(ids); {
				j := i
				for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
					j++
				}
				t.Logf("missing ids %d..%d: confirmed %s .. %s through %s .. %s", ids[i], ids[j],
					p.confirmedAt[ids[i]].Format("15:04:05.000"), p.confirmedAt[ids[j]].Format("15:04:05.000"), p.via[ids[i]], p.via[ids[j]])
				i = j + 1
			}
			p.mu.Unlock()
			for _, r := range restarts {
				t.Logf("%s stopped %s, up %s", r.node, r.from.Format("15:04:05.000"), r.upAt.Format("15:04:05.000"))
			}
			for _, nd := range nodes {
				var q map[string]any
				_, _ = nd.tryAPI("GET", "/api/queues/%2F/"+queue, nil, &q)
				t.Logf("%s's view of %s: messages %v ready %v unacked %v leader %v members %v", nd.name, queue,
					q["messages"], q["messages_ready"], q["messages_unacknowledged"], q["leader"], q["members"])
			}
			t.FailNow()
		}
	}
}

func joinSorted(s []string) string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}
