package test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Clustered streams: a stream declared in a 3-node cluster is a Raft
// group of x-initial-cluster-size members; a confirm means a majority has
// the message; consumers read from any member; the leader's SIGKILL loses
// nothing confirmed; the killed node, restarted, catches up.

// streamPublishRetry publishes body through node nd with a confirm,
// retrying (on a new connection) until it is confirmed.
func streamPublishRetry(t *testing.T, nodes []*cnode, queue, body string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		nd := nodes[attempt%len(nodes)]
		if !nd.p.Running() {
			continue
		}
		conn, err := amqp.Dial(nd.url())
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		var ok bool
		if err == nil {
			var dc *amqp.DeferredConfirmation
			dc, err = ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, amqp.Publishing{Body: []byte(body)})
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				ok, err = dc.WaitContext(ctx)
				cancel()
			}
		}
		conn.Close()
		if err == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%q never confirmed", body)
}

// readAll reads from first on node nd until want bodies were seen (in
// order, each once; a message that a failover nacked and the retry
// published again may appear twice) and checks the offsets are dense.
func streamReadAll(t *testing.T, nd *cnode, queue string, want []string) {
	t.Helper()
	_, ch := dialNode(t, nd)
	if err := ch.Qos(500, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatalf("consume on %s: %v", nd.name, err)
	}
	next := 0
	var last int64 = -1
	for next < len(want) {
		select {
		case d := <-ds:
			off := d.Headers["x-stream-offset"].(int64)
			if off != last+1 {
				t.Fatalf("%s: offset %d after %d", nd.name, off, last)
			}
			last = off
			if string(d.Body) == want[next] {
				next++
			} else if next == 0 || string(d.Body) != want[next-1] {
				t.Fatalf("%s: offset %d is %q, want %q", nd.name, off, d.Body, want[next])
			}
			_ = d.Ack(false)
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: read %d of %d confirmed messages", nd.name, next, len(want))
		}
	}
}

func TestStreamClusterLeaderKill(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare("cs", true, false, false, false, amqp.Table{"x-queue-type": "stream", "x-initial-cluster-size": int32(3)}); err != nil {
		t.Fatal(err)
	}
	var members []any
	eventually(t, 15*time.Second, "a leader with 3 members", func() bool {
		var q struct {
			Type    string `json:"type"`
			Leader  string `json:"leader"`
			Members []any  `json:"members"`
		}
		code := nodes[1].api(t, "GET", "/api/queues/%2F/cs", nil, &q)
		members = q.Members
		return code == 200 && q.Type == "stream" && q.Leader != "" && len(q.Members) == 3
	})
	var want []string
	// Through every node: followers forward to the leader.
	for i := 0; i < 90; i++ {
		b := "a" + strconv.Itoa(i)
		streamPublishRetry(t, nodes[i%3:i%3+1], "cs", b)
		want = append(want, b)
	}
	for _, nd := range nodes {
		streamReadAll(t, nd, "cs", want)
	}
	// A named consumer's offset, stored as it acks on one node, is where
	// a consumer of that name resumes on another.
	{
		_, c1 := dialNode(t, nodes[1])
		_ = c1.Qos(10, 0, false)
		ds, err := c1.Consume("cs", "", false, false, false, false, amqp.Table{"x-stream-offset": "first", "x-stream-consumer-name": "billing"})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			d := receive(t, ds)
			_ = d.Ack(false)
		}
		_ = c1.Close()
		eventually(t, 10*time.Second, "the offset on node 2", func() bool {
			var q struct {
				Stream struct {
					Consumers []struct {
						Name   string `json:"name"`
						Offset int    `json:"offset"`
					} `json:"consumer_offsets"`
				} `json:"stream"`
			}
			nodes[2].api(t, "GET", "/api/queues/%2F/cs", nil, &q)
			return len(q.Stream.Consumers) == 1 && q.Stream.Consumers[0].Offset == 19
		})
		_, c2 := dialNode(t, nodes[2])
		_ = c2.Qos(10, 0, false)
		ds, err = c2.Consume("cs", "", false, false, false, false, amqp.Table{"x-stream-consumer-name": "billing"})
		if err != nil {
			t.Fatal(err)
		}
		if d := receive(t, ds); string(d.Body) != "a20" {
			t.Fatalf("named consumer resumed on another node at %q, want a20", d.Body)
		}
		_ = c2.Close()
	}
	victim := leaderIndex(nodes, "cs")
	if victim < 0 {
		t.Fatal("no leader")
	}
	_ = nodes[victim].p.Kill()
	var alive []*cnode
	for _, nd := range nodes {
		if nd.i != victim {
			alive = append(alive, nd)
		}
	}
	for i := 0; i < 30; i++ {
		b := "b" + strconv.Itoa(i)
		streamPublishRetry(t, alive, "cs", b)
		want = append(want, b)
	}
	for _, nd := range alive {
		streamReadAll(t, nd, "cs", want)
	}
	// The killed node comes back and catches up from the group.
	if err := nodes[victim].p.Restart(); err != nil {
		t.Fatal(err)
	}
	var seen map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for {
		var q map[string]any
		code, err := nodes[victim].tryAPI("GET", "/api/queues/%2F/cs", nil, &q)
		seen = q
		if err == nil && code == 200 && q["messages"].(float64) >= float64(len(want)) {
			break
		}
		if time.Now().After(deadline) {
			var b map[string]any
			nodes[victim].tryAPI("GET", "/api/queues/%2F/cs/browse?count=200", nil, &b)
			var offs []any
			for _, m := range b["messages"].([]any) {
				offs = append(offs, m.(map[string]any)["offset"], m.(map[string]any)["payload"])
			}
			t.Fatalf("the restarted node's stream: %v (want %d messages); holds %v", seen["stream"], len(want), offs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	streamReadAll(t, nodes[victim], "cs", want)
	t.Logf("members %v; leader %s killed; %d confirmed messages read on every node, the restarted one included", members, nodes[victim].name, len(want))
}

// streamView is what the management API says of a stream on one node.
type streamView struct {
	Messages int64  `json:"messages"`
	Bytes    int64  `json:"bytes"`
	Segments int    `json:"segments"`
	First    uint64 `json:"first_offset"`
	Last     int64  `json:"last_offset"`
}

func viewStream(nd *cnode, queue string) (streamView, bool) {
	var q struct {
		Stream streamView `json:"stream"`
	}
	code, err := nd.tryAPI("GET", "/api/queues/%2F/"+queue, nil, &q)
	return q.Stream, err == nil && code == 200
}

// Retention tests: segments of retSegBytes, at most retMaxBytes kept.
const (
	retSegBytes = 1000
	retMaxBytes = 4000
)

// retBody is message i of the retention tests: 100 bytes whatever i, so
// that every record has one size and the segments one length.
func retBody(i int) string {
	b := []byte(strconv.Itoa(i) + " ")
	for len(b) < 100 {
		b = append(b, '.')
	}
	return string(b)
}

// retention is a clustered stream "cr" with retention, and what its
// records' size makes of the leader's segments.
type retention struct {
	t     *testing.T
	nodes []*cnode
	rec   int64  // bytes of one record
	per   uint64 // records a segment: a boundary every per offsets
}

// newRetention declares the stream, waits for its leader and a confirmed
// probe (offset 0), and reads the record size from the leader's bytes (a
// segment rolls when the next record would take it past retSegBytes).
func newRetention(t *testing.T, nodes []*cnode) *retention {
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare("cr", true, false, false, false, amqp.Table{"x-queue-type": "stream",
		"x-max-length-bytes": int64(retMaxBytes), "x-stream-max-segment-size-bytes": int64(retSegBytes)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "a leader", func() bool { return leaderIndex(nodes, "cr") >= 0 })
	streamPublishRetry(t, nodes, "cr", retBody(0))
	r := &retention{t: t, nodes: nodes}
	eventually(t, 10*time.Second, "the probe on the leader", func() bool {
		li := leaderIndex(nodes, "cr")
		if li < 0 {
			return false
		}
		v, ok := viewStream(nodes[li], "cr")
		r.rec = v.Bytes
		return ok && v.Messages == 1 && v.Bytes > 100
	})
	r.per = uint64(retSegBytes / r.rec)
	return r
}

func (r *retention) boundary(off uint64) bool { return off%r.per == 0 }

// sample records the first offsets the nodes for which watch says yes
// report, every 20 ms, until the returned stop is called, which returns
// them sorted.
func (r *retention) sample(watch func(*cnode) bool) (stop func() []uint64) {
	quit := make(chan struct{})
	out := make(chan []uint64, 1)
	go func() {
		seen := map[uint64]bool{}
		defer func() {
			var offs []uint64
			for off := range seen {
				offs = append(offs, off)
			}
			slices.Sort(offs)
			out <- offs
		}()
		for {
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, nd := range r.nodes {
				if !nd.p.Running() || !watch(nd) {
					continue
				}
				if v, ok := viewStream(nd, "cr"); ok && v.Messages > 0 {
					seen[v.First] = true
				}
			}
		}
	}()
	return func() []uint64 { close(quit); return <-out }
}

// publish publishes retBody(from..to-1) through nd with confirms, calling
// at(i) (if not nil) before message i.
func (r *retention) publish(nd *cnode, from, to int, at func(i int)) {
	r.t.Helper()
	_, ch := dialNode(r.t, nd)
	if err := ch.Confirm(false); err != nil {
		r.t.Fatal(err)
	}
	for i := from; i < to; i++ {
		if at != nil {
			at(i)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "cr", false, false, amqp.Publishing{Body: []byte(retBody(i))})
		if err != nil {
			r.t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctxTimeout(r.t, 10*time.Second)); !ok || err != nil {
			r.t.Fatalf("confirm %d: %v %v", i, ok, err)
		}
	}
}

// settled waits until every running node holds offsets up to last from
// one first offset, within the byte limit, and checks that it is a
// segment boundary and that whole segments went (what is left is within
// a segment of the limit, in more than one segment on the leader).
func (r *retention) settled(what string, last int64) uint64 {
	r.t.Helper()
	var first uint64
	var views []streamView
	var lv streamView
	ok := func() bool {
		views = views[:0]
		li := leaderIndex(r.nodes, "cr")
		if li < 0 {
			return false
		}
		var ok bool
		lv, ok = viewStream(r.nodes[li], "cr")
		// Segments: a node named leader whose index is one segment has
		// not taken up the lead yet, or just lost it (a leader that
		// stepped down on a loaded machine, named still by a follower
		// that has not heard of it): wait for the one that leads.
		if !ok || lv.Last != last || lv.First == 0 || lv.Bytes > retMaxBytes || lv.Segments < 2 {
			return false
		}
		first = lv.First
		for _, nd := range r.nodes {
			if !nd.p.Running() {
				continue
			}
			v, ok := viewStream(nd, "cr")
			views = append(views, v)
			if !ok || v.Last != last || v.First != first || v.Messages != last-int64(first)+1 || v.Bytes <= 0 || v.Bytes > retMaxBytes+r.rec {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			// Say what each node shows, for the next one to read.
			r.t.Fatalf("timed out after 30s waiting for %s (last offset %d): leader's view %+v; running nodes' views %+v", what, last, lv, views)
		}
	}
	if !r.boundary(first) {
		r.t.Fatalf("%s: first offset %d is not a segment boundary (every %d offsets)", what, first, r.per)
	}
	if lv.Bytes <= retMaxBytes-retSegBytes-r.rec || lv.Segments < 2 {
		r.t.Fatalf("%s: the leader keeps %d bytes in %d segments, limit %d, segments of %d", what, lv.Bytes, lv.Segments, retMaxBytes, retSegBytes)
	}
	r.t.Logf("%s: first offset %d; views %+v", what, first, views)
	return first
}

// readsFrom checks that a consumer from first on every running node
// starts at offset first.
func (r *retention) readsFrom(first uint64) {
	r.t.Helper()
	for _, nd := range r.nodes {
		if !nd.p.Running() {
			continue
		}
		_, c := dialNode(r.t, nd)
		_ = c.Qos(50, 0, false)
		ds, err := c.Consume("cr", "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
		if err != nil {
			r.t.Fatal(err)
		}
		d := receive(r.t, ds)
		if off := d.Headers["x-stream-offset"].(int64); uint64(off) != first || string(d.Body) != retBody(int(first)) {
			r.t.Fatalf("%s: read from first starts at %d (%.8q), first retained %d", nd.name, off, d.Body, first)
		}
		_ = c.Close()
	}
}

// allBoundaries fails unless every offset in offs is a segment boundary,
// and at least min of them were seen.
func (r *retention) allBoundaries(who string, offs []uint64, min int) {
	r.t.Helper()
	for _, off := range offs {
		if !r.boundary(off) {
			r.t.Fatalf("%s: a first offset of %d, not a segment boundary (every %d offsets): the head went in pieces (seen %v)", who, off, r.per, offs)
		}
	}
	if len(offs) < min {
		r.t.Fatalf("%s: first offsets seen %v; the passes were not observed", who, offs)
	}
}

// TestStreamClusterRetention: the leader of a clustered stream applies
// x-max-length-bytes by whole segments of x-stream-max-segment-size-bytes,
// each pass one range delete through the group: every member's copy
// loses the same head at once, so a follower's first offset only ever
// moves from one of the leader's segment boundaries to another, and a
// reader from first on any member starts there. A follower killed
// (SIGKILL) while passes go on comes back with the same first offset as
// the others, its store replayed from its log.
func TestStreamClusterRetention(t *testing.T) {
	nodes := startCluster(t, 3)
	r := newRetention(t, nodes)
	ld := nodes[leaderIndex(nodes, "cr")]
	var followers []*cnode
	for _, nd := range nodes {
		if nd != ld {
			followers = append(followers, nd)
		}
	}
	stop := r.sample(func(nd *cnode) bool { return nd != ld })

	r.publish(ld, 1, 200, nil)
	first := r.settled("retention on every member", 199)
	r.readsFrom(first)

	// A follower killed in the middle of more passes, then restarted.
	victim := followers[0]
	r.publish(ld, 200, 400, func(i int) {
		if i == 260 {
			if err := victim.p.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err := victim.p.Restart(); err != nil {
		t.Fatal(err)
	}
	after := r.settled("the restarted follower caught up", 399)
	if after <= first {
		t.Fatalf("first offset %d after the second run, %d before", after, first)
	}
	r.readsFrom(after)
	offs := stop()
	r.allBoundaries("followers", offs, 3)
	t.Logf("records of %d bytes, %d a segment; followers' first offsets seen %v; final first %d", r.rec, r.per, offs, after)
}

// TestStreamClusterRetentionLeaderKill: the leader is killed (SIGKILL)
// while its passes go on; the new leader cuts the range it finds into
// segments again from the first retained offset, and as the records are
// all of one size its boundaries are the old leader's: every member's
// first offset stays on them, and all settle on the same one, the old
// leader too once restarted.
func TestStreamClusterRetentionLeaderKill(t *testing.T) {
	nodes := startCluster(t, 3)
	r := newRetention(t, nodes)
	li := leaderIndex(nodes, "cr")
	old := nodes[li]
	stop := r.sample(func(*cnode) bool { return true })
	r.publish(old, 1, 150, nil)
	first := r.settled("retention before the kill", 149)
	if err := old.p.Kill(); err != nil {
		t.Fatal(err)
	}
	var alive []*cnode
	for _, nd := range nodes {
		if nd != old {
			alive = append(alive, nd)
		}
	}
	eventually(t, 20*time.Second, "a new leader", func() bool {
		i := leaderIndex(alive, "cr")
		return i >= 0 && nodes[i] != old
	})
	// Through the survivors, each publish confirmed (a retry after a
	// nack may store one twice: the offsets stay dense, the sizes one).
	for i := 150; i < 300; i++ {
		streamPublishRetry(t, alive, "cr", retBody(i))
	}
	last := int64(-1)
	eventually(t, 15*time.Second, "the last offset on the new leader", func() bool {
		i := leaderIndex(alive, "cr")
		if i < 0 {
			return false
		}
		v, ok := viewStream(nodes[i], "cr")
		last = v.Last
		return ok && v.Last >= 299
	})
	if err := old.p.Restart(); err != nil {
		t.Fatal(err)
	}
	after := r.settled("every member after the leader's kill", last)
	if after <= first {
		t.Fatalf("first offset %d after the kill, %d before", after, first)
	}
	r.readsFrom(after)
	offs := stop()
	r.allBoundaries("members", offs, 3)
	t.Logf("records of %d bytes, %d a segment; first offsets seen %v; final first %d", r.rec, r.per, offs, after)
}

// declareClusterStream declares the durable stream name of 3 members
// through nodes[0] and waits until it has a leader; it returns its
// members, the first of them the stream's home.
func declareClusterStream(t *testing.T, nodes []*cnode, name string) []string {
	t.Helper()
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "stream", "x-initial-cluster-size": int32(3)}); err != nil {
		t.Fatal(err)
	}
	var members []string
	eventually(t, 15*time.Second, "a leader with 3 members", func() bool {
		var q struct {
			Leader  string   `json:"leader"`
			Members []string `json:"members"`
		}
		code := nodes[0].api(t, "GET", "/api/queues/%2F/"+name, nil, &q)
		members = q.Members
		return code == 200 && q.Leader != "" && len(q.Members) == 3
	})
	return members
}

// TestStreamClusterNonMember: in a 4-node cluster a stream of 3 members
// leaves one node without a copy. A consumer there reads the stream
// through a member (from first, from a numeric offset, by name), with
// x-stream-offset on every delivery and acks as credit; publishes there
// reach the stream, confirmed once the group committed them.
func TestStreamClusterNonMember(t *testing.T) {
	nodes := startCluster(t, 4)
	members := declareClusterStream(t, nodes, "cn")
	var outsider, member *cnode
	for _, nd := range nodes {
		if !slices.Contains(members, nd.name) {
			outsider = nd
		} else if member == nil {
			member = nd
		}
	}
	if outsider == nil || member == nil {
		t.Fatalf("members %v: no outsider among the 4 nodes", members)
	}

	// 50 through a member, 50 through the outsider, each confirmed.
	want := append(numbered("m", 0, 50), numbered("o", 0, 50)...)
	_, mch := dialNode(t, member)
	streamPublish(t, mch, "", "cn", want[:50], nil)
	_, och := dialNode(t, outsider)
	streamPublish(t, och, "", "cn", want[50:], nil)
	// Confirmed means committed by the group: every member has them.
	for _, nd := range nodes {
		if nd != outsider {
			streamReadAll(t, nd, "cn", want)
		}
	}

	// From first, with a prefetch well below the count: acks are credit.
	c1, ds := consumeStream(t, outsider.url(), "cn", 10, amqp.Table{"x-stream-offset": "first"})
	bodies, offs := takeStream(t, ds, len(want))
	if !slices.Equal(bodies, want) {
		t.Fatalf("outsider read from first %v, want %v", bodies, want)
	}
	for i, off := range offs {
		if off != offs[0]+int64(i) {
			t.Fatalf("offsets not dense: %v", offs)
		}
	}
	// The consumer follows the tail: a message published now arrives.
	streamPublish(t, mch, "", "cn", []string{"tail"}, nil)
	if b, o := takeStream(t, ds, 1); b[0] != "tail" || o[0] != offs[len(offs)-1]+1 {
		t.Fatalf("tail delivery %q at %d, want tail at %d", b[0], o[0], offs[len(offs)-1]+1)
	}
	_ = c1.Close()

	// From a numeric offset.
	from := offs[0] + 40
	c2, ds := consumeStream(t, outsider.url(), "cn", 5, amqp.Table{"x-stream-offset": from})
	bodies, offs2 := takeStream(t, ds, 20)
	if !slices.Equal(bodies, want[40:60]) || offs2[0] != from || offs2[19] != from+19 {
		t.Fatalf("outsider read from %d: %v at %v, want %v", from, bodies, offs2, want[40:60])
	}
	_ = c2.Close()

	// A named consumer: its offset is kept by the member it reads from
	// (and replicated); one of that name resumes after it.
	c3, ds := consumeStream(t, outsider.url(), "cn", 10, amqp.Table{"x-stream-offset": "first", "x-stream-consumer-name": "audit"})
	takeStream(t, ds, 10)
	_ = c3.Close()
	eventually(t, 10*time.Second, "the named offset stored", func() bool {
		var q struct {
			Stream struct {
				Consumers []struct {
					Name   string `json:"name"`
					Offset int64  `json:"offset"`
					Active bool   `json:"active"`
				} `json:"consumer_offsets"`
			} `json:"stream"`
		}
		member.api(t, "GET", "/api/queues/%2F/cn", nil, &q)
		for _, c := range q.Stream.Consumers {
			if c.Name == "audit" {
				return c.Offset == offs[9] && !c.Active
			}
		}
		return false
	})
	c4, ds := consumeStream(t, outsider.url(), "cn", 10, amqp.Table{"x-stream-consumer-name": "audit"})
	if b, o := takeStream(t, ds, 1); b[0] != want[10] || o[0] != offs[10] {
		t.Fatalf("named consumer resumed at %q (%d), want %q (%d)", b[0], o[0], want[10], offs[10])
	}
	_ = c4.Close()
}
