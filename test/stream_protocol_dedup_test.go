package test

import (
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	amqp10 "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/trident-broker/trident/test/testbin"
)

// Deduplication of named producers on RabbitMQ's stream protocol, with the
// real rabbitmq-stream-go-client and a real broker process: a producer
// whose connection dies mid-stream (cut at a TCP proxy in front of the
// broker), or whose broker is killed with SIGKILL, reconnects, asks the
// stream for its last publishing id and resends from its own buffer
// everything it has no confirm for (and some it has): every resend is
// confirmed, and the stream holds each message exactly once, in order.

// cutProxy forwards TCP connections to a target; cut closes every open one
// (both sides) at once, as a network failure would.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close(); c.Close() }()
			go func() { _, _ = io.Copy(c, u); u.Close(); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *cutProxy) cut() {
	p.mu.Lock()
	cs := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// dedupBody is the body of publishing id id.
func dedupBody(id int64) string { return "m-" + strconv.FormatInt(id, 10) }

// dedupProducer is a named producer that sends explicit publishing ids and
// records which were confirmed.
type dedupProducer struct {
	p         *stream.Producer
	mu        sync.Mutex
	confirmed map[int64]bool
	refused   []int64
	nconf     atomic.Int64
}

func newDedupProducer(t *testing.T, env *stream.Environment, name, ref string) *dedupProducer {
	t.Helper()
	p, err := env.NewProducer(name, stream.NewProducerOptions().SetProducerName(ref))
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	d := &dedupProducer{p: p, confirmed: map[int64]bool{}}
	ch := p.NotifyPublishConfirmation()
	go func() {
		for cs := range ch {
			d.mu.Lock()
			for _, c := range cs {
				if c.IsConfirmed() {
					d.confirmed[c.GetPublishingId()] = true
					d.nconf.Add(1)
				} else {
					d.refused = append(d.refused, c.GetPublishingId())
				}
			}
			d.mu.Unlock()
		}
	}()
	return d
}

// send publishes ids [from, to] in batches until stop is set or a send
// fails; it returns when it stops.
func (d *dedupProducer) send(from, to int64, stop *atomic.Bool) {
	batch := make([]message.StreamMessage, 0, 50)
	for id := from; id <= to && !stop.Load(); id++ {
		m := amqp10.NewMessage([]byte(dedupBody(id)))
		m.SetPublishingId(id)
		batch = append(batch, m)
		if len(batch) == cap(batch) || id == to {
			if err := d.p.BatchSend(batch); err != nil {
				return
			}
			batch = batch[:0]
		}
	}
}

// waitConfirmed waits until every id in [from, to] is confirmed.
func (d *dedupProducer) waitConfirmed(t *testing.T, from, to int64) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		d.mu.Lock()
		missing := int64(-1)
		for id := from; id <= to; id++ {
			if !d.confirmed[id] {
				missing = id
				break
			}
		}
		refused := append([]int64(nil), d.refused...)
		d.mu.Unlock()
		if len(refused) > 0 {
			t.Fatalf("publishing ids refused: %v", refused[:min(len(refused), 10)])
		}
		if missing < 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("publishing id %d never confirmed", missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstUnconfirmed is the lowest id in [from, to] without a confirm, and
// the highest confirmed one (0 if none).
func (d *dedupProducer) firstUnconfirmed(from, to int64) (first, highest int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	first = to + 1
	for id := from; id <= to; id++ {
		if !d.confirmed[id] && first > to {
			first = id
		}
		if d.confirmed[id] {
			highest = id
		}
	}
	return first, highest
}

// interrupted publishes from..to with a fresh producer named ref and runs
// interrupt once at least `after` of them are confirmed, while the rest
// are still being sent. It returns the first id without a confirm.
func dedupInterrupted(t *testing.T, env *stream.Environment, name, ref string, from, to, after int64, interrupt func()) (firstUnconfirmed, highestConfirmed int64) {
	t.Helper()
	d := newDedupProducer(t, env, name, ref)
	var stop atomic.Bool
	sent := make(chan struct{})
	go func() { d.send(from, to, &stop); close(sent) }()
	deadline := time.Now().Add(90 * time.Second)
	for d.nconf.Load() < after {
		if time.Now().After(deadline) {
			t.Fatalf("only %d confirmed before the interruption", d.nconf.Load())
		}
		time.Sleep(time.Millisecond)
	}
	interrupt()
	stop.Store(true)
	select {
	case <-sent:
	case <-time.After(30 * time.Second):
		t.Log("the client's send did not return after the interruption")
	}
	first, highest := d.firstUnconfirmed(from, to)
	if first > to {
		t.Fatalf("every message was confirmed before the interruption: send more")
	}
	return first, highest
}

// resend is what a client does after a reconnect: a new producer of the
// same name asks the stream for its last publishing id (which must cover
// every confirmed id) and sends again from its buffer everything from
// `from` (some of it stored already) to `to`; every id must be confirmed.
func dedupResend(t *testing.T, env *stream.Environment, name, ref string, highestConfirmed, from, to int64) {
	t.Helper()
	d := newDedupProducer(t, env, name, ref)
	last, err := d.p.GetLastPublishingId()
	if err != nil {
		t.Fatalf("GetLastPublishingId: %v", err)
	}
	if last < highestConfirmed {
		t.Fatalf("last publishing id %d, but %d was confirmed", last, highestConfirmed)
	}
	t.Logf("resending %d..%d (the stream holds up to %d)", from, to, last)
	var stop atomic.Bool
	d.send(from, to, &stop)
	d.waitConfirmed(t, from, to)
	if last2, err := d.p.GetLastPublishingId(); err != nil || last2 != to {
		t.Fatalf("last publishing id after the resend: %d, %v; want %d", last2, err, to)
	}
	_ = d.p.Close()
}

// dedupCheckLog reads the stream from first and checks it holds exactly
// the ids 1..n, once each and in order.
func dedupCheckLog(t *testing.T, env *stream.Environment, name string, n int64) {
	t.Helper()
	got := spConsume(t, env, name, stream.OffsetSpecification{}.First())
	got.wait(t, int(n))
	stats, err := env.StreamStats(name)
	if err != nil {
		t.Fatalf("StreamStats: %v", err)
	}
	if last, err := stats.CommittedChunkId(); err != nil || last != n-1 {
		t.Fatalf("the stream's last offset is %d (%v), want %d: a message was stored twice or lost", last, err, n-1)
	}
	time.Sleep(200 * time.Millisecond) // anything past n would have arrived
	got.mu.Lock()
	defer got.mu.Unlock()
	if int64(len(got.bodies)) != n {
		t.Fatalf("read %d messages, want %d", len(got.bodies), n)
	}
	for i, b := range got.bodies {
		if want := dedupBody(int64(i + 1)); b != want {
			t.Fatalf("offset %d holds %q, want %q", i, b, want)
		}
	}
}

// TestStreamProtocolDedupResend: a named producer's resends after a killed
// connection and after kill -9 of the broker are stored once.
func TestStreamProtocolDedupResend(t *testing.T) {
	port, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	px := newCutProxy(t, target)
	// Clients reach the broker through the proxy: metadata and open
	// advertise the proxy's port, so the producer's own connection goes
	// through it too.
	proc := testbin.Start(t, "--stream-listen", target, "--stream-advertised-port", strconv.Itoa(px.port()))
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: px.port()}
	const name, ref = "sp-dedup", "dedup-producer"
	const n1, n2 = 20000, 40000

	env := streamEnv(t, addr, "guest", "guest")
	if err := env.DeclareStream(name, nil); err != nil {
		t.Fatal(err)
	}
	if seq, err := env.QuerySequence(ref, name); err != nil || seq != 0 {
		t.Fatalf("sequence of an unknown producer: %d, %v", seq, err)
	}

	// 1. The connection dies mid-stream.
	first, highest := dedupInterrupted(t, env, name, ref, 1, n1, 2000, px.cut)
	env2 := streamEnv(t, addr, "guest", "guest")
	dedupResend(t, env2, name, ref, highest, max(first-500, 1), n1)
	dedupCheckLog(t, env2, name, n1)

	// 2. The broker is killed mid-stream and restarted.
	first, highest = dedupInterrupted(t, env2, name, ref, n1+1, n2, 2000, func() {
		if err := proc.Kill(); err != nil {
			t.Fatal(err)
		}
	})
	px.cut()
	if err := proc.Restart(); err != nil {
		t.Fatal(err)
	}
	env3 := streamEnv(t, addr, "guest", "guest")
	dedupResend(t, env3, name, ref, highest, max(first-500, n1+1), n2)
	dedupCheckLog(t, env3, name, n2)

	// 3. After a clean restart the sequence is read back from the log.
	if err := proc.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := proc.Restart(); err != nil {
		t.Fatal(err)
	}
	env4 := streamEnv(t, addr, "guest", "guest")
	if seq, err := env4.QuerySequence(ref, name); err != nil || seq != n2 {
		t.Fatalf("sequence after a restart: %d, %v; want %d", seq, err, n2)
	}
	if seq, err := env4.QuerySequence("another", name); err != nil || seq != 0 {
		t.Fatalf("sequence of another producer: %d, %v", seq, err)
	}
}

// TestStreamProtocolDedupCluster: in a 3-node cluster a named producer
// publishes through a follower (its publishes forwarded to the leader),
// resends through the other follower, and after the leader's kill -9
// resends through a survivor: the new leader knows the producer's last
// id from its own copy of the log, and the stream holds each message
// once.
func TestStreamProtocolDedupCluster(t *testing.T) {
	const n = 3
	nodes, addrs := startStreamCluster(t, n)
	const name, ref = "sp-dedup-cl", "cl-producer"
	env0 := streamEnv(t, addrs[0], "guest", "guest")
	if err := env0.DeclareStream(name, &stream.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, nodes, name, 30*time.Second)
	var followers []int
	for i := range nodes {
		if i != leader {
			followers = append(followers, i)
		}
	}
	envF := streamEnv(t, addrs[followers[0]], "guest", "guest")
	d := newDedupProducer(t, envF, name, ref)
	var stop atomic.Bool
	d.send(1, 3000, &stop)
	d.waitConfirmed(t, 1, 3000)
	_ = d.p.Close()

	// A resend through the other follower, half of it stored already.
	envG := streamEnv(t, addrs[followers[1]], "guest", "guest")
	d = newDedupProducer(t, envG, name, ref)
	d.send(2001, 4000, &stop)
	d.waitConfirmed(t, 2001, 4000)
	_ = d.p.Close()
	eventually(t, 20*time.Second, "the follower's sequence", func() bool {
		seq, err := envG.QuerySequence(ref, name)
		return err == nil && seq == 4000
	})

	// A stream of 2 members (declared over AMQP: the client cannot set
	// its size): the third node has no copy to read a sequence from and
	// says so rather than answer 0.
	const small = "sp-dedup-2"
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare(small, true, false, false, false, amqp.Table{"x-queue-type": "stream", "x-initial-cluster-size": int32(2)}); err != nil {
		t.Fatal(err)
	}
	var members []string
	eventually(t, 20*time.Second, "a leader with 2 members", func() bool {
		var q struct {
			Leader  string   `json:"leader"`
			Members []string `json:"members"`
		}
		code := nodes[0].api(t, "GET", "/api/queues/%2F/"+small, nil, &q)
		members = q.Members
		return code == 200 && q.Leader != "" && len(q.Members) == 2
	})
	for _, nd := range nodes {
		env := streamEnv(t, addrs[nd.i], "guest", "guest")
		eventually(t, 20*time.Second, "the 2-member stream on "+nd.name, func() bool {
			ok, err := env.StreamExists(small)
			return err == nil && ok
		})
		seq, err := env.QuerySequence(ref, small)
		if member := slices.Contains(members, nd.name); member != (err == nil) || seq != 0 {
			t.Fatalf("sequence through %s (member %v): %d, %v", nd.name, member, seq, err)
		}
	}

	// The leader dies; a survivor resends 3001..5000.
	if err := nodes[leader].p.Kill(); err != nil {
		t.Fatal(err)
	}
	var alive []*cnode
	for _, nd := range nodes {
		if nd.i != leader {
			alive = append(alive, nd)
		}
	}
	newLeader := alive[leaderOf(t, alive, name, 60*time.Second)].i
	envN := streamEnv(t, addrs[newLeader], "guest", "guest")
	eventually(t, 30*time.Second, "the new leader's sequence", func() bool {
		seq, err := envN.QuerySequence(ref, name)
		return err == nil && seq == 4000
	})
	survivor := followers[0]
	if survivor == newLeader {
		survivor = followers[1]
	}
	envS := streamEnv(t, addrs[survivor], "guest", "guest")
	d = newDedupProducer(t, envS, name, ref)
	d.send(3001, 5000, &stop)
	d.waitConfirmed(t, 3001, 5000)
	_ = d.p.Close()
	dedupCheckLog(t, envS, name, 5000)
	t.Logf("leader %s killed, %s leads now; 5000 messages once each", nodes[leader].name, nodes[newLeader].name)
}
