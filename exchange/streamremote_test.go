package exchange

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeStreamRemote is a StreamRemote that records every upstream consumer
// started (ConsumeWith) and every credit given back (Ack).
type fakeStreamRemote struct {
	fakeRemote
	mu2      sync.Mutex
	sessions []Table // the args of each ConsumeWith, in order
	prefs    []int
	push     func(*Message, uint64, bool)
	reset    func()
	acked    []uint64
}

func (r *fakeStreamRemote) ConsumeWith(args Table, prefetch int, push func(*Message, uint64, bool), reset func()) {
	r.mu2.Lock()
	defer r.mu2.Unlock()
	r.sessions = append(r.sessions, args)
	r.prefs = append(r.prefs, prefetch)
	r.push, r.reset = push, reset
}

func (r *fakeStreamRemote) Ack(tag uint64) {
	r.mu2.Lock()
	r.acked = append(r.acked, tag)
	r.mu2.Unlock()
}

func (r *fakeStreamRemote) cb() (func(*Message, uint64, bool), func()) {
	r.mu2.Lock()
	defer r.mu2.Unlock()
	return r.push, r.reset
}

func (r *fakeStreamRemote) last() (Table, int, int) {
	r.mu2.Lock()
	defer r.mu2.Unlock()
	return r.sessions[len(r.sessions)-1], r.prefs[len(r.prefs)-1], len(r.sessions)
}

func (r *fakeStreamRemote) acks() []uint64 {
	r.mu2.Lock()
	defer r.mu2.Unlock()
	return append([]uint64(nil), r.acked...)
}

// outsiderCluster is a node that is not a member of any stream: its
// consumers read through r.
type outsiderCluster struct {
	fakeCluster
	r *fakeStreamRemote
}

func (c *outsiderCluster) StreamRemote(*Queue) StreamRemote { return c.r }

// newOutsiderStream declares stream "s" on a node "d" of a cluster whose
// members of it are a, b and c.
func newOutsiderStream(t *testing.T) (*VHost, *Queue, *fakeStreamRemote) {
	t.Helper()
	v, _ := newTestVHost(t)
	return outsiderStreamOn(t, v)
}

func outsiderStreamOn(t *testing.T, v *VHost) (*VHost, *Queue, *fakeStreamRemote) {
	t.Helper()
	q := declareQ(t, v, "s", QueueOpts{Durable: true, Args: Table{"x-queue-type": "stream"}})
	r := &fakeStreamRemote{}
	v.b.SetCluster(&outsiderCluster{fakeCluster: fakeCluster{name: "d"}, r: r})
	q.setMembers([]string{"a", "b", "c"})
	return v, q, r
}

func offMsg(off int64) *Message {
	return &Message{Body: []byte{byte(off)}, Props: Properties{Headers: Table{"x-stream-offset": off}}}
}

func deliveredOffsets(s *sink) []int64 {
	var out []int64
	for _, d := range s.deliveries() {
		out = append(out, d.Msg.Props.Headers["x-stream-offset"].(int64))
	}
	return out
}

// TestStreamRemoteResetKeepsPrefetch: after the upstream consumer is lost
// and a new one started (with a fresh prefetch), the consumer still holds
// at most its prefetch unacked: what the new one pushes waits for acks of
// the deliveries made before the loss, and what was pushed but not
// delivered is read again from the new one, in order, none twice.
func TestStreamRemoteResetKeepsPrefetch(t *testing.T) {
	v, q, r := newOutsiderStream(t)
	s := &sink{}
	if _, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 3, Sink: s, Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "n"}}); err != nil {
		t.Fatal(err)
	}
	args, pref, n := r.last()
	if n != 1 || pref != 3 || args["x-stream-offset"] != "first" || args["x-stream-consumer-name"] != "n" {
		t.Fatalf("first upstream consumer %v prefetch %d (%d started)", args, pref, n)
	}
	push, reset := r.cb()
	for off := int64(10); off < 13; off++ {
		push(offMsg(off), uint64(100+off), false)
	}
	if got := deliveredOffsets(s); !slices.Equal(got, []int64{10, 11, 12}) {
		t.Fatalf("delivered %v", got)
	}
	// The member goes: a new upstream consumer after offset 12.
	reset()
	args, pref, n = r.last()
	if n != 2 || pref != 3 || args["x-stream-offset"] != int64(13) || args["x-stream-consumer-name"] != "n" {
		t.Fatalf("after a loss: upstream consumer %v prefetch %d (%d started)", args, pref, n)
	}
	push, reset = r.cb()
	push(offMsg(12), 200, false) // seen already: dropped, credit back
	for off := int64(13); off < 16; off++ {
		push(offMsg(off), uint64(201+off-13), false)
	}
	if got := s.len(); got != 3 {
		t.Fatalf("%d delivered with prefetch 3 and none acked, want 3", got)
	}
	if _, unacked, _ := q.Stats(); unacked != 3 {
		t.Fatalf("%d unacked, want 3", unacked)
	}
	if got := r.acks(); !slices.Equal(got, []uint64{200}) {
		t.Fatalf("upstream acks %v, want the duplicate's 200", got)
	}
	// An ack of a delivery of the lost consumer frees local credit only.
	q.Ack(s.deliveries()[0].Seq)
	if got := deliveredOffsets(s); !slices.Equal(got, []int64{10, 11, 12, 13}) {
		t.Fatalf("delivered %v after one ack", got)
	}
	if got := r.acks(); !slices.Equal(got, []uint64{200}) {
		t.Fatalf("upstream acks %v: a dead tag was acked", got)
	}
	// Lost again with 14 and 15 pushed and not delivered: they are read
	// again from the next upstream consumer.
	reset()
	args, _, n = r.last()
	if n != 3 || args["x-stream-offset"] != int64(14) {
		t.Fatalf("third upstream consumer %v (%d started), want from 14", args, n)
	}
	push, _ = r.cb()
	for off := int64(14); off < 17; off++ {
		push(offMsg(off), uint64(300+off), false)
	}
	ds := s.deliveries()
	q.AckMany([]uint64{ds[1].Seq, ds[2].Seq, ds[3].Seq})
	if got := deliveredOffsets(s); !slices.Equal(got, []int64{10, 11, 12, 13, 14, 15, 16}) {
		t.Fatalf("delivered %v", got)
	}
	if _, unacked, _ := q.Stats(); unacked != 3 {
		t.Fatalf("%d unacked, want 3", unacked)
	}
	ds = s.deliveries()
	q.Ack(ds[4].Seq) // 14: a live tag
	if got := r.acks(); !slices.Equal(got, []uint64{200, 314}) {
		t.Fatalf("upstream acks %v, want 200 and 314", got)
	}
}

// TestStreamRemoteResetBeforeAnyDelivery: an upstream consumer lost before
// it pushed anything is started again with the consumer's own offset.
func TestStreamRemoteResetBeforeAnyDelivery(t *testing.T) {
	v, _, r := newOutsiderStream(t)
	s := &sink{}
	if _, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 5, Sink: s, Args: Table{"x-stream-offset": int64(7)}}); err != nil {
		t.Fatal(err)
	}
	_, reset := r.cb()
	reset()
	args, _, n := r.last()
	if n != 2 || args["x-stream-offset"] != int64(7) {
		t.Fatalf("restarted upstream consumer %v (%d started), want from 7", args, n)
	}
	if _, ok := args["x-stream-consumer-name"]; ok {
		t.Fatalf("an unnamed consumer got a name upstream: %v", args)
	}
}

// storedOffset is the named offset record of stream s in st, -1 none.
func storedOffset(st *fakeStore, name string) int64 {
	st.Mu.Lock()
	defer st.Mu.Unlock()
	val, ok := st.Meta["streamoff//\x00s\x00"+name]
	if !ok {
		return -1
	}
	r, err := decodeRecord(val)
	if err != nil {
		return -2
	}
	off, _ := r["offset"].(uint64)
	return int64(off)
}

// TestStreamRemoteNamedOffsetOfLostDeliveries: a named consumer's acks
// that reach the member (live tags) leave its offset to the member; acks
// of deliveries whose upstream consumer was lost reach no member, so the
// node stores the offset itself (a metadata record, cluster-wide), until
// an ack that reaches a member takes over.
func TestStreamRemoteNamedOffsetOfLostDeliveries(t *testing.T) {
	fs := newFakeStore()
	v, q, r := outsiderStreamOn(t, mustVHost(t, newTestBroker(t, fs), "/"))
	s := &sink{}
	c, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 3, Sink: s, Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "n"}})
	if err != nil {
		t.Fatal(err)
	}
	push, reset := r.cb()
	for off := int64(10); off < 13; off++ {
		push(offMsg(off), uint64(100+off), false)
	}
	ds := s.deliveries()
	q.Ack(ds[0].Seq) // reaches the member
	q.st.mu.Lock()
	dirty := q.st.dirty["n"]
	q.st.mu.Unlock()
	if dirty || !slices.Equal(r.acks(), []uint64{110}) {
		t.Fatalf("a live ack: dirty %v, upstream acks %v", dirty, r.acks())
	}
	reset()
	q.AckMany([]uint64{ds[2].Seq, ds[1].Seq}) // dead tags: 12, then 11
	if got := r.acks(); !slices.Equal(got, []uint64{110}) {
		t.Fatalf("dead tags acked upstream: %v", got)
	}
	eventually(t, 5*time.Second, "offset 12 stored", func() bool { return storedOffset(fs, "n") == 12 })
	// The next upstream consumer's deliveries: their acks are the member's.
	push, _ = r.cb()
	push(offMsg(13), 213, false)
	q.st.mu.Lock()
	q.st.dirty["n"] = true // as if 12 were still to be written
	q.st.mu.Unlock()
	q.Ack(s.deliveries()[3].Seq)
	q.st.mu.Lock()
	dirty = q.st.dirty["n"]
	q.st.mu.Unlock()
	if dirty || !slices.Equal(r.acks(), []uint64{110, 213}) {
		t.Fatalf("a live ack after a lost one: dirty %v, upstream acks %v", dirty, r.acks())
	}
	c.Cancel()
	if got := storedOffset(fs, "n"); got != 12 {
		t.Fatalf("stored offset %d after the member took over, want 12 (the member stores 13)", got)
	}
}

// TestStreamRemoteNamedOffsetKeptOnLoss: a named consumer's acks that
// reach the member are the member's to store; when its upstream consumer
// is lost (the member died, perhaps before it wrote them) this node
// stores the highest one itself, unless it holds a later consumer's
// offset of the name already.
func TestStreamRemoteNamedOffsetKeptOnLoss(t *testing.T) {
	fs := newFakeStore()
	v, q, r := outsiderStreamOn(t, mustVHost(t, newTestBroker(t, fs), "/"))
	s := &sink{}
	if _, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 5, Sink: s, Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "n"}}); err != nil {
		t.Fatal(err)
	}
	push, reset := r.cb()
	for off := int64(0); off < 5; off++ {
		push(offMsg(off), uint64(100+off), false)
	}
	ds := s.deliveries()
	q.AckMany([]uint64{ds[0].Seq, ds[1].Seq, ds[2].Seq}) // live: the member's
	time.Sleep(2 * offsetFlushEvery)
	if got := storedOffset(fs, "n"); got != -1 {
		t.Fatalf("stored offset %d while the member has it, want none", got)
	}
	reset()
	eventually(t, 5*time.Second, "offset 2 stored on the loss", func() bool { return storedOffset(fs, "n") == 2 })

	// A later consumer of the name stored its offset meanwhile: a loss of
	// this one leaves it.
	q.Ack(ds[3].Seq) // a dead tag: stored here, 3
	eventually(t, 5*time.Second, "offset 3 stored", func() bool { return storedOffset(fs, "n") == 3 })
	q.st.mu.Lock()
	later := namedOffset{off: 1, epoch: q.st.epochLocked()}
	q.st.offsets["n"] = later
	q.st.mu.Unlock()
	push, reset = r.cb()
	push(offMsg(5), 205, false)
	q.Ack(s.deliveries()[5].Seq) // live again: the member's
	reset()
	q.st.mu.Lock()
	got, dirty := q.st.offsets["n"], q.st.dirty["n"]
	q.st.mu.Unlock()
	if got != later || dirty {
		t.Fatalf("after a loss the name's offset is %+v (dirty %v), want the later consumer's %+v", got, dirty, later)
	}
}

// TestStreamRemoteResetFromNext: a consumer from next (the default) or
// last whose upstream consumer is lost before anything was pushed starts
// again from the second it subscribed in, not at the new member's next:
// what was published while the member was lost is not skipped. A named
// one keeps its own start (its stored offset decides).
func TestStreamRemoteResetFromNext(t *testing.T) {
	for _, spec := range []any{nil, "next", "last"} {
		v, _, r := newOutsiderStream(t)
		args := Table{}
		if spec != nil {
			args["x-stream-offset"] = spec
		}
		before := time.Now()
		if _, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 5, Sink: &sink{}, Args: args}); err != nil {
			t.Fatal(err)
		}
		_, reset := r.cb()
		reset()
		got, _, n := r.last()
		ts, ok := got["x-stream-offset"].(time.Time)
		if n != 2 || !ok || ts.After(time.Now()) || ts.Before(before.Truncate(time.Second)) || ts.Nanosecond() != 0 {
			t.Fatalf("%v: restarted upstream consumer %v (%d started), want from the second it subscribed in (%v)", spec, got, n, before)
		}
	}
	v, _, r := newOutsiderStream(t)
	if _, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 5, Sink: &sink{}, Args: Table{"x-stream-consumer-name": "n"}}); err != nil {
		t.Fatal(err)
	}
	_, reset := r.cb()
	reset()
	if got, _, _ := r.last(); got["x-stream-offset"] != nil {
		t.Fatalf("a named consumer restarted at %v, want its stored offset (no x-stream-offset)", got["x-stream-offset"])
	}
}

// TestStreamRemotePassesEpoch: a named consumer on a non-member gives its
// epoch to each upstream consumer, the one after a reset included, so
// that every member's records of it carry one epoch.
func TestStreamRemotePassesEpoch(t *testing.T) {
	_, q, r := newOutsiderStream(t)
	s := &sink{}
	if _, err := q.vh.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 3, Sink: s, Args: Table{"x-stream-consumer-name": "n"}}); err != nil {
		t.Fatal(err)
	}
	_, reset := r.cb()
	reset()
	r.mu.Lock()
	sessions := slices.Clone(r.sessions)
	r.mu.Unlock()
	if len(sessions) != 2 {
		t.Fatalf("%d upstream consumers, want 2", len(sessions))
	}
	e0, _ := sessions[0][consumerEpochArg].(int64)
	e1, _ := sessions[1][consumerEpochArg].(int64)
	if e0 <= 0 || e1 != e0 {
		t.Fatalf("upstream epochs %v, %v: want one, non-zero", sessions[0][consumerEpochArg], sessions[1][consumerEpochArg])
	}
}

// TestStreamRemoteSACRejoinsOnceSettled: a single-active member whose
// upstream consumer is lost while it holds deliveries starts no new one
// (its StreamRemote stops consuming) until it settled them: the group
// forms again on the next home without it meanwhile, so that a member
// whose credit is taken cannot hold the group.
func TestStreamRemoteSACRejoinsOnceSettled(t *testing.T) {
	v, q, r := newOutsiderStream(t)
	s := &sink{}
	if _, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 3, Sink: s,
		Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "g", "x-single-active-consumer": true}}); err != nil {
		t.Fatal(err)
	}
	push, reset := r.cb()
	for off := int64(0); off < 3; off++ {
		push(offMsg(off), uint64(100+off), false)
	}
	ds := s.deliveries()
	reset()
	r.fakeRemote.mu.Lock()
	stopped := r.fakeRemote.stopped
	r.fakeRemote.mu.Unlock()
	if _, _, n := r.last(); n != 1 || stopped != 1 {
		t.Fatalf("lost holding 3: %d upstream consumers started, stopped %d times; want 1 and 1", n, stopped)
	}
	q.Ack(ds[0].Seq)
	q.Reject([]uint64{ds[2].Seq}, false)
	if _, _, n := r.last(); n != 1 {
		t.Fatalf("%d upstream consumers started while one delivery is held, want 1", n)
	}
	q.Ack(ds[1].Seq)
	args, _, n := r.last()
	if n != 2 || args["x-stream-offset"] != int64(3) || args["x-single-active-consumer"] != true || args["x-stream-consumer-name"] != "g" {
		t.Fatalf("after the last settle: upstream consumer %v (%d started), want a member from 3", args, n)
	}

	// Lost again holding nothing: it starts again at once.
	_, reset = r.cb()
	reset()
	if _, _, n := r.last(); n != 3 {
		t.Fatalf("lost holding nothing: %d upstream consumers started, want 3", n)
	}
}

// homerCluster is a member "b" of stream "s" whose home is "a": its
// single-active consumers go to the home (home), the others to the first
// other member alive (r).
type homerCluster struct {
	outsiderCluster
	home *fakeStreamRemote
}

func (c *homerCluster) StreamHome(*Queue) string             { return "a" }
func (c *homerCluster) StreamHomeRemote(*Queue) StreamRemote { return c.home }

// TestStreamRemoteSACGoesHome: a single-active member on a member that is
// not the stream's home reads through the StreamRemote to the home (which
// follows the home when it moves, this node included), not through the
// one to the first other member.
func TestStreamRemoteSACGoesHome(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "s", QueueOpts{Durable: true, Args: Table{"x-queue-type": "stream"}})
	c := &homerCluster{outsiderCluster: outsiderCluster{fakeCluster: fakeCluster{name: "b"}, r: &fakeStreamRemote{}}, home: &fakeStreamRemote{}}
	v.b.SetCluster(c)
	q.setMembers([]string{"a", "b", "c"})
	if _, err := v.Consume("s", ConsumeOpts{Tag: "m", Prefetch: 3, Sink: &sink{},
		Args: Table{"x-stream-consumer-name": "g", "x-single-active-consumer": true}}); err != nil {
		t.Fatal(err)
	}
	c.home.mu2.Lock()
	home := len(c.home.sessions)
	c.home.mu2.Unlock()
	c.r.mu2.Lock()
	other := len(c.r.sessions)
	c.r.mu2.Unlock()
	if home != 1 || other != 0 {
		t.Fatalf("a member's upstream consumers: %d to the home, %d to the first other member; want 1 and 0", home, other)
	}
}

// TestStreamNamedOffsetOfOneEpochOnlyRises: two upstream consumers of one
// non-member's named consumer (the one before a failover and the one
// after, with the consumer's epoch) on a member: the first one's late ack
// of an earlier offset does not take the name back behind what the second
// stored, while a later consumer of the name (a later epoch) going back
// does.
func TestStreamNamedOffsetOfOneEpochOnlyRises(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	for i := 0; i < 10; i++ {
		publish(t, v, "", "s", fmt.Sprint(i))
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 10 })
	args := func(spec any, epoch int64) Table {
		a := Table{"x-stream-offset": spec, "x-stream-consumer-name": "n"}
		if epoch != 0 {
			a[consumerEpochArg] = epoch
		}
		return a
	}
	const epoch = 1 << 60 // above the stream's clock: the node's own would be later
	_, before := consume(t, v, "s", ConsumeOpts{Prefetch: 10, Args: args("first", epoch)})
	_, after := consume(t, v, "s", ConsumeOpts{Prefetch: 10, Args: args(int64(5), epoch)})
	waitFor(t, "deliveries", func() bool { return before.len() == 10 && after.len() == 5 })
	q.Ack(after.deliveries()[2].Seq) // offset 7
	if off, _ := q.StreamOffset("n"); off != 7 {
		t.Fatalf("stored offset %d after the second consumer acked 7", off)
	}
	q.Ack(before.deliveries()[3].Seq) // offset 3, late
	if off, _ := q.StreamOffset("n"); off != 7 {
		t.Fatalf("stored offset %d after the first consumer's late ack of 3, want 7 still", off)
	}
	q.Ack(before.deliveries()[8].Seq) // offset 8: one consumer's offset rises
	if off, _ := q.StreamOffset("n"); off != 8 {
		t.Fatalf("stored offset %d after an ack of 8, want 8", off)
	}
	_, later := consume(t, v, "s", ConsumeOpts{Prefetch: 10, Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "n", consumerEpochArg: int64(epoch + 1)}})
	waitFor(t, "the later consumer's deliveries", func() bool { return later.len() == 10 })
	q.Ack(later.deliveries()[1].Seq)
	if off, _ := q.StreamOffset("n"); off != 1 {
		t.Fatalf("stored offset %d after a later consumer that went back acked 1, want 1", off)
	}
}
