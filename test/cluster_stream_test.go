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

// TestStreamClusterRetention: the leader of a clustered stream applies
// x-max-length-bytes by whole segments of x-stream-max-segment-size-bytes,
// each pass one range delete through the group: every member's copy
// loses the same head at once, so a follower's first offset only ever
// moves from one of the leader's segment boundaries to another, and a
// reader from first on any member starts there. A follower killed
// (SIGKILL) while passes go on comes back with the same first offset as
// the others, its store replayed from its log.
func TestStreamClusterRetention(t *testing.T) {
	const (
		segBytes = 1000
		maxBytes = 4000
	)
	nodes := startCluster(t, 3)
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare("cr", true, false, false, false, amqp.Table{"x-queue-type": "stream",
		"x-max-length-bytes": int64(maxBytes), "x-stream-max-segment-size-bytes": int64(segBytes)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "a leader", func() bool { return leaderIndex(nodes, "cr") >= 0 })
	// The probe, offset 0, is the size of every later message: the
	// leader's bytes then give the record size, and so the segments'
	// length in messages (a segment rolls when the next message would
	// take it past segBytes), and their boundaries.
	body := func(i int) string {
		b := []byte(strconv.Itoa(i) + " ")
		for len(b) < 100 {
			b = append(b, '.')
		}
		return string(b)
	}
	streamPublishRetry(t, nodes, "cr", body(0))
	ld := nodes[leaderIndex(nodes, "cr")]
	var rec int64
	eventually(t, 10*time.Second, "the probe on the leader", func() bool {
		v, ok := viewStream(ld, "cr")
		rec = v.Bytes
		return ok && v.Messages == 1 && v.Bytes > 100
	})
	per := uint64(segBytes / rec)
	var followers []*cnode
	for _, nd := range nodes {
		if nd != ld {
			followers = append(followers, nd)
		}
	}

	// Sample the followers' first offsets while the passes run.
	stop := make(chan struct{})
	sampled := make(chan map[uint64]bool, 1)
	go func() {
		seen := map[uint64]bool{}
		defer func() { sampled <- seen }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, nd := range followers {
				if !nd.p.Running() {
					continue
				}
				if v, ok := viewStream(nd, "cr"); ok && v.Messages > 0 {
					seen[v.First] = true
				}
			}
		}
	}()

	publish := func(from, to int, through *cnode, killAt int, victim *cnode) {
		t.Helper()
		_, pch := dialNode(t, through)
		if err := pch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			if i == killAt {
				if err := victim.p.Kill(); err != nil {
					t.Fatal(err)
				}
			}
			dc, err := pch.PublishWithDeferredConfirmWithContext(context.Background(), "", "cr", false, false, amqp.Publishing{Body: []byte(body(i))})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctxTimeout(t, 10*time.Second)); !ok || err != nil {
				t.Fatalf("confirm %d: %v %v", i, ok, err)
			}
		}
	}
	boundary := func(off uint64) bool { return off%per == 0 }
	// settled waits until every running node has offsets up to last and
	// the same first offset, a boundary, with the bytes within the limit.
	settled := func(what string, last int64) uint64 {
		t.Helper()
		var first uint64
		var views []streamView
		eventually(t, 20*time.Second, what, func() bool {
			views = views[:0]
			lv, ok := viewStream(ld, "cr")
			if !ok || lv.Last != last || lv.First == 0 || lv.Bytes > maxBytes {
				return false
			}
			first = lv.First
			for _, nd := range nodes {
				v, ok := viewStream(nd, "cr")
				views = append(views, v)
				if !ok || v.Last != last || v.First != first || v.Messages != last-int64(first)+1 || v.Bytes > maxBytes+rec {
					return false
				}
			}
			return true
		})
		lv, _ := viewStream(ld, "cr")
		if !boundary(first) {
			t.Fatalf("%s: first offset %d is not a segment boundary (every %d offsets)", what, first, per)
		}
		// Whole segments only: what is left is within a segment of the
		// limit, in more than one segment.
		if lv.Bytes <= maxBytes-segBytes-rec || lv.Segments < 2 {
			t.Fatalf("%s: the leader keeps %d bytes in %d segments, limit %d, segments of %d", what, lv.Bytes, lv.Segments, maxBytes, segBytes)
		}
		t.Logf("%s: first offset %d; views %+v", what, first, views)
		return first
	}

	publish(1, 200, ld, -1, nil)
	first := settled("retention on every member", 199)
	for _, nd := range nodes {
		_, c := dialNode(t, nd)
		_ = c.Qos(50, 0, false)
		ds, err := c.Consume("cr", "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
		if err != nil {
			t.Fatal(err)
		}
		d := receive(t, ds)
		if off := d.Headers["x-stream-offset"].(int64); uint64(off) != first || string(d.Body) != body(int(first)) {
			t.Fatalf("%s: read from first starts at %d (%.8q), first retained %d", nd.name, off, d.Body, first)
		}
		_ = c.Close()
	}

	// A follower killed in the middle of more passes, then restarted.
	victim := followers[0]
	publish(200, 400, ld, 260, victim)
	if err := victim.p.Restart(); err != nil {
		t.Fatal(err)
	}
	after := settled("the restarted follower caught up", 399)
	if after <= first {
		t.Fatalf("first offset %d after the second run, %d before", after, first)
	}
	close(stop)
	seen := <-sampled
	var offs []uint64
	for off := range seen {
		offs = append(offs, off)
		if !boundary(off) {
			t.Fatalf("a follower's first offset was %d, not a segment boundary (every %d offsets): the head went in pieces", off, per)
		}
	}
	slices.Sort(offs)
	if len(offs) < 3 {
		t.Fatalf("followers' first offsets seen: %v; the passes were not observed", offs)
	}
	t.Logf("records of %d bytes, %d a segment; followers' first offsets seen %v; final first %d", rec, per, offs, after)
}

// TestStreamClusterNonMember: in a 4-node cluster a stream of 3 members
// leaves one node without a copy. A consumer there reads the stream
// through a member (from first, from a numeric offset, by name), with
// x-stream-offset on every delivery and acks as credit; publishes there
// reach the stream, confirmed once the group committed them.
func TestStreamClusterNonMember(t *testing.T) {
	nodes := startCluster(t, 4)
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare("cn", true, false, false, false, amqp.Table{"x-queue-type": "stream", "x-initial-cluster-size": int32(3)}); err != nil {
		t.Fatal(err)
	}
	var members []string
	eventually(t, 15*time.Second, "a leader with 3 members", func() bool {
		var q struct {
			Leader  string   `json:"leader"`
			Members []string `json:"members"`
		}
		code := nodes[0].api(t, "GET", "/api/queues/%2F/cn", nil, &q)
		members = q.Members
		return code == 200 && q.Leader != "" && len(q.Members) == 3
	})
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
