package test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A consumer on a node that is not a member of a clustered stream reads
// through a member; these tests take that member away (kill -9, or a
// graceful stop) while messages are published and consumed, bring it
// back, and check with amqp091-go consumers on the outsider that
//   - a reader from first gets every offset once, dense and in order, and
//     every confirmed message, with x-stream-offset on each delivery,
//     through another member and again after the member's restart (a
//     killed member is still one and its consumers move back to it; a
//     stopped one left the cluster and may have been replaced);
//   - a consumer that never acks holds exactly its prefetch, across the
//     reconnects (the new upstream consumer's fresh prefetch does not add
//     to what is still unacked here);
//   - a named consumer goes on across them and, cancelled, is resumed
//     right after its last ack by a new consumer of its name;
//   - a named offset stored while the member was up is where a consumer
//     of that name resumes while the member is down (it is cluster-wide).

func TestStreamClusterNonMemberReconnectKill(t *testing.T) {
	testStreamNonMemberReconnect(t, true)
}

func TestStreamClusterNonMemberReconnectStop(t *testing.T) {
	testStreamNonMemberReconnect(t, false)
}

// streamTaker collects a consumer's deliveries and the first thing wrong
// with them: a delivery without x-stream-offset, an offset that is not the
// one after the last (it reads from first: every offset, once, in order),
// more unacked than limit (a consumer that does not ack).
type streamTaker struct {
	mu      sync.Mutex
	offs    []int64
	bodies  []string
	bad     string
	stopped bool // takes (acks, records) nothing more
	closed  bool
}

// take runs over ds until it closes, acking each delivery if ack.
func (s *streamTaker) take(ds <-chan amqp.Delivery, ack bool, limit int) {
	for d := range ds {
		off, ok := d.Headers["x-stream-offset"].(int64)
		s.mu.Lock()
		switch {
		case s.bad != "":
		case !ok:
			s.bad = fmt.Sprintf("delivery %q without an int64 x-stream-offset: %#v", d.Body, d.Headers)
		case len(s.offs) > 0 && off != s.offs[len(s.offs)-1]+1:
			s.bad = fmt.Sprintf("offset %d (%q) after %d", off, d.Body, s.offs[len(s.offs)-1])
		case !ack && len(s.offs)+1 > limit:
			s.bad = fmt.Sprintf("delivery %d (offset %d) with prefetch %d and none acked", len(s.offs)+1, off, limit)
		}
		// Recorded once acked, under mu: once stop returned, no ack is
		// sent, and every delivery recorded was acked before.
		if s.stopped || (ack && d.Ack(false) != nil) {
			s.mu.Unlock()
			continue
		}
		s.offs = append(s.offs, off)
		s.bodies = append(s.bodies, string(d.Body))
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// closeAndLast closes ch, the taker's channel, waits until its deliveries
// stop and returns the last offset it acked.
func (s *streamTaker) closeAndLast(t *testing.T, ch *amqp.Channel) int64 {
	t.Helper()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	_ = ch.Close() // after the acks on the connection
	eventually(t, 15*time.Second, "the consumer's deliveries to stop", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closed
	})
	_, last, _ := s.state()
	return last
}

func (s *streamTaker) state() (n int, last int64, bad string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last = -1
	if len(s.offs) > 0 {
		last = s.offs[len(s.offs)-1]
	}
	return len(s.offs), last, s.bad
}

func (s *streamTaker) check(t *testing.T, who string) {
	t.Helper()
	if _, _, bad := s.state(); bad != "" {
		t.Fatalf("%s: %s", who, bad)
	}
}

// startTaker consumes queue on nd with prefetch and args.
func startTaker(t *testing.T, nd *cnode, queue string, prefetch int, args amqp.Table, ack bool) (*amqp.Channel, *streamTaker) {
	t.Helper()
	ch, ds := consumeStream(t, nd.url(), queue, prefetch, args)
	s := &streamTaker{}
	go s.take(ds, ack, prefetch)
	return ch, s
}

// streamPublisher publishes "p<i>" for i = 0, 1, ... through one node
// with confirms, one at a time, until stopped; a message that is not
// confirmed (nacked during a failover, or its connection lost) is
// published again, so it may be in the stream twice.
type streamPublisher struct {
	mu        sync.Mutex
	confirmed int // p0 .. p<confirmed-1> are confirmed
	stop      chan struct{}
	done      chan struct{}
}

func startStreamPublisher(nd *cnode, queue string) *streamPublisher {
	p := &streamPublisher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var (
			conn *amqp.Connection
			ch   *amqp.Channel
		)
		defer func() {
			if conn != nil {
				conn.Close()
			}
		}()
		for i := 0; ; {
			select {
			case <-p.stop:
				return
			default:
			}
			if ch == nil || ch.IsClosed() {
				if conn != nil {
					conn.Close()
				}
				var err error
				if conn, err = amqp.Dial(nd.url()); err == nil {
					if ch, err = conn.Channel(); err == nil {
						err = ch.Confirm(false)
					}
				}
				if err != nil {
					ch = nil
					time.Sleep(50 * time.Millisecond) // retry pacing, not a wait for a condition
					continue
				}
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
				amqp.Publishing{Body: []byte("p" + strconv.Itoa(i))})
			if err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ok, err := dc.WaitContext(ctx)
			cancel()
			if err == nil && ok {
				i++
				p.mu.Lock()
				p.confirmed = i
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *streamPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.confirmed
}

// finish stops the publisher and returns how many it had confirmed.
func (p *streamPublisher) finish() int {
	close(p.stop)
	<-p.done
	return p.count()
}

// streamInfo is a node's view of a stream: last offset, consumers reading
// on it, named offsets.
type streamInfo struct {
	Consumers int `json:"consumers"`
	Stream    struct {
		Last    int64 `json:"last_offset"`
		Offsets []struct {
			Name   string `json:"name"`
			Offset int64  `json:"offset"`
			Active bool   `json:"active"`
		} `json:"consumer_offsets"`
	} `json:"stream"`
}

func (c *cnode) streamInfo(queue string) (streamInfo, bool) {
	var si streamInfo
	code, err := c.tryAPI("GET", "/api/queues/%2F/"+queue, nil, &si)
	return si, err == nil && code == 200
}

// waitNamedOffset waits until every node in nds holds want as the stored
// offset of consumer name, with no consumer of that name attached there.
func waitNamedOffset(t *testing.T, nds []*cnode, queue, name string, want int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var seen []string
		done := true
		for _, nd := range nds {
			off, active := nd.namedOffset(queue, name)
			seen = append(seen, fmt.Sprintf("%s: %d active %v", nd.name, off, active))
			done = done && off == want && !active
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's stored offset, want %d everywhere: %v", name, want, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// namedOffset is the stored offset of consumer name on node c, -1 none,
// and whether one of that name is attached there.
func (c *cnode) namedOffset(queue, name string) (int64, bool) {
	si, ok := c.streamInfo(queue)
	if !ok {
		return -1, false
	}
	for _, o := range si.Stream.Offsets {
		if o.Name == name {
			return o.Offset, o.Active
		}
	}
	return -1, false
}

func testStreamNonMemberReconnect(t *testing.T, kill bool) {
	nodes := startCluster(t, 4)
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare("rc", true, false, false, false, amqp.Table{"x-queue-type": "stream", "x-initial-cluster-size": int32(3)}); err != nil {
		t.Fatal(err)
	}
	var members []string
	eventually(t, 15*time.Second, "a leader with 3 members", func() bool {
		var q struct {
			Leader  string   `json:"leader"`
			Members []string `json:"members"`
		}
		code, err := nodes[0].tryAPI("GET", "/api/queues/%2F/rc", nil, &q)
		members = q.Members
		return err == nil && code == 200 && q.Leader != "" && len(q.Members) == 3
	})
	var outsider *cnode
	for _, nd := range nodes {
		if !slices.Contains(members, nd.name) {
			outsider = nd
		}
	}
	if outsider == nil {
		t.Fatalf("members %v: no outsider among the 4 nodes", members)
	}
	// A confirmed probe first: the group has a leader that commits.
	streamPublishRetry(t, nodes, "rc", "probe")

	// On the outsider: a reader, a named consumer, one that never acks.
	const holdPrefetch = 5
	_, reader := startTaker(t, outsider, "rc", 10, amqp.Table{"x-stream-offset": "first"}, true)
	namedCh, named := startTaker(t, outsider, "rc", 10, amqp.Table{"x-stream-offset": "first", "x-stream-consumer-name": "nm"}, true)
	_, holder := startTaker(t, outsider, "rc", holdPrefetch, amqp.Table{"x-stream-offset": "first"}, false)

	// The member they read through has their three upstream consumers.
	var via *cnode
	eventually(t, 15*time.Second, "the outsider's consumers on one member", func() bool {
		via = nil
		for _, nd := range nodes {
			if nd == outsider {
				continue
			}
			if si, ok := nd.streamInfo("rc"); ok && si.Consumers == 3 {
				via = nd
			}
		}
		return via != nil
	})
	var pubNode *cnode
	for _, nd := range nodes {
		if nd != outsider && nd != via {
			pubNode = nd
			break
		}
	}
	pub := startStreamPublisher(pubNode, "rc")
	t.Cleanup(func() {
		select {
		case <-pub.stop:
		default:
			pub.finish()
		}
	})
	progress := func(what string, s *streamTaker, n int) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() bool {
			got, _, bad := s.state()
			return got >= n || bad != ""
		})
		s.check(t, what)
	}
	progress("the reader's first 50", reader, 50)
	progress("the named consumer's first 50", named, 50)
	eventually(t, 15*time.Second, "the holder's prefetch", func() bool {
		n, _, bad := holder.state()
		return n >= holdPrefetch || bad != ""
	})
	holder.check(t, "holder")

	// A named consumer that read 20 and was cancelled while the member is
	// up: its offset is stored cluster-wide.
	nm2Ch, nm2 := startTaker(t, outsider, "rc", 5, amqp.Table{"x-stream-offset": "first", "x-stream-consumer-name": "nm2"}, true)
	progress("nm2's 20", nm2, 20)
	nm2Last := nm2.closeAndLast(t, nm2Ch)
	waitNamedOffset(t, nodes, "rc", "nm2", nm2Last)

	// A named consumer that holds its prefetch unacked when the member
	// goes, and acks it afterwards.
	nm3Conn, nm3Ch := dialNode(t, outsider)
	if err := nm3Ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	nm3ds, err := nm3Ch.Consume("rc", "", false, false, false, false, amqp.Table{"x-stream-offset": "first", "x-stream-consumer-name": "nm3"})
	if err != nil {
		t.Fatal(err)
	}
	var nm3Held []amqp.Delivery
	for len(nm3Held) < 10 {
		nm3Held = append(nm3Held, receive(t, nm3ds))
	}
	eventually(t, 15*time.Second, "nm3's upstream consumer on "+via.name, func() bool {
		si, ok := via.streamInfo("rc")
		return ok && si.Consumers == 4
	})

	how := "killed"
	if kill {
		if err := via.p.Kill(); err != nil {
			t.Fatal(err)
		}
	} else {
		how = "stopped"
		if err := via.p.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("members %v; the outsider %s reads through %s, %s with %d confirmed", members, outsider.name, via.name, how, pub.count())

	// Through another member while it is down.
	n, _, _ := reader.state()
	progress("the reader going on while "+via.name+" is down", reader, n+50)
	n, _, _ = named.state()
	progress("the named consumer going on while "+via.name+" is down", named, n+50)
	// nm3's upstream consumer is on another member now (with the other
	// three): its acks of what the lost one delivered reach no member, and
	// its offset is stored by the outsider.
	eventually(t, 60*time.Second, "the outsider's four consumers on another member", func() bool {
		for _, nd := range nodes {
			if nd == outsider || nd == via {
				continue
			}
			if si, ok := nd.streamInfo("rc"); ok && si.Consumers == 4 {
				return true
			}
		}
		return false
	})
	for _, d := range nm3Held {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	_ = nm3Ch.Close() // after the acks on the connection
	_ = nm3Conn.Close()
	var up []*cnode
	for _, nd := range nodes {
		if nd != via {
			up = append(up, nd)
		}
	}
	waitNamedOffset(t, up, "rc", "nm3", 9)
	nm3bCh, nm3b := startTaker(t, outsider, "rc", 5, amqp.Table{"x-stream-consumer-name": "nm3"}, true)
	progress("nm3 resumed", nm3b, 1)
	nm3b.mu.Lock()
	first3 := nm3b.offs[0]
	nm3b.mu.Unlock()
	if first3 != 10 {
		t.Fatalf("nm3, which acked offsets 0..9 after %s went, resumed at %d, want 10", via.name, first3)
	}
	_ = nm3bCh.Close()

	// nm2 resumes after its stored offset, read through another member.
	nm2bCh, nm2b := startTaker(t, outsider, "rc", 5, amqp.Table{"x-stream-consumer-name": "nm2"}, true)
	progress("nm2 resumed", nm2b, 1)
	nm2b.mu.Lock()
	first := nm2b.offs[0]
	nm2b.mu.Unlock()
	if first != nm2Last+1 {
		t.Fatalf("nm2 resumed at %d while %s is down, want %d", first, via.name, nm2Last+1)
	}
	_ = nm2bCh.Close()

	// Back. Killed, it is still a member, the first alive: the consumers
	// move back to it. Stopped, it left the cluster, and the group's
	// leader may have replaced it meanwhile (by the outsider, even): the
	// consumers stay where they are; it must answer again all the same.
	if err := via.p.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, via.name+" answering after its restart", func() bool {
		si, ok := via.streamInfo("rc")
		return ok && (!kill || si.Consumers == 3)
	})
	n, _, _ = reader.state()
	progress("the reader after "+via.name+"'s restart", reader, n+50)
	n, _, _ = named.state()
	progress("the named consumer after "+via.name+"'s restart", named, n+50)

	confirmed := pub.finish()
	// Every message in the stream reaches the reader and the named one.
	// The members agree on the last offset once they applied everything.
	var last int64
	eventually(t, 30*time.Second, "the members' last offsets to agree", func() bool {
		var q struct {
			Members []string `json:"members"`
		}
		if code, err := pubNode.tryAPI("GET", "/api/queues/%2F/rc", nil, &q); err != nil || code != 200 || len(q.Members) == 0 {
			return false
		}
		last = -1
		for _, nd := range nodes {
			if !slices.Contains(q.Members, nd.name) {
				continue
			}
			si, ok := nd.streamInfo("rc")
			if !ok || (last >= 0 && si.Stream.Last != last) {
				return false
			}
			last = si.Stream.Last
		}
		return last > 0
	})
	for _, s := range []*streamTaker{reader, named} {
		eventually(t, 60*time.Second, fmt.Sprintf("every offset up to %d", last), func() bool {
			_, l, bad := s.state()
			return l >= last || bad != ""
		})
	}
	reader.check(t, "reader")
	named.check(t, "named consumer")
	for _, s := range []*streamTaker{reader, named} {
		s.mu.Lock()
		offs, bodies := slices.Clone(s.offs), slices.Clone(s.bodies)
		s.mu.Unlock()
		if offs[0] != 0 || bodies[0] != "probe" || offs[len(offs)-1] != last {
			t.Fatalf("read offsets %d..%d (first %q), want 0..%d from the probe", offs[0], offs[len(offs)-1], bodies[0], last)
		}
		// In publish order (a republished one may follow itself), every
		// confirmed one among them.
		prev, seen := -1, map[int]bool{}
		for _, b := range bodies[1:] {
			i, err := strconv.Atoi(strings.TrimPrefix(b, "p"))
			if err != nil || i < prev {
				t.Fatalf("%q after p%d", b, prev)
			}
			prev, seen[i] = i, true
		}
		for i := 0; i < confirmed; i++ {
			if !seen[i] {
				t.Fatalf("confirmed p%d never delivered (%d confirmed, offsets 0..%d)", i, confirmed, last)
			}
		}
	}
	// The holder still holds exactly its prefetch: the first offsets.
	holder.check(t, "holder")
	holder.mu.Lock()
	held := slices.Clone(holder.offs)
	holder.mu.Unlock()
	if !slices.Equal(held, []int64{0, 1, 2, 3, 4}) {
		t.Fatalf("the consumer that does not ack (prefetch %d) got offsets %v", holdPrefetch, held)
	}

	// The named consumer, cancelled, is resumed right after its last ack.
	namedLast := named.closeAndLast(t, namedCh)
	waitNamedOffset(t, nodes, "rc", "nm", namedLast)
	_, pch := dialNode(t, pubNode)
	streamPublish(t, pch, "", "rc", []string{"after"}, nil)
	_, again := startTaker(t, outsider, "rc", 10, amqp.Table{"x-stream-consumer-name": "nm"}, true)
	progress("nm resumed", again, 1)
	again.mu.Lock()
	off, body := again.offs[0], again.bodies[0]
	again.mu.Unlock()
	if off != namedLast+1 || body != "after" {
		t.Fatalf("nm resumed at %d (%q), want %d (after)", off, body, namedLast+1)
	}
	t.Logf("%d confirmed, offsets 0..%d read once each on the outsider; the holder kept %d", confirmed, last, len(held))
}
