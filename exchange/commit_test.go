package exchange

import (
	"errors"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"
)

// lateLog is a quorum queue's MessageLog that commits only when told:
// commit writes the appends up to a key (and the deletes queued) to the
// node's store, as the FSM would, reports them to the queue (LogApplied) and then calls their done
// callbacks, as quorum.Log does; fail reports appends failed.
type lateLog struct {
	st *fakeStore
	q  *Queue

	mu      sync.Mutex
	appends []lateAppend
	deletes []uint64
}

type lateAppend struct {
	key  uint64
	data []byte
	done func(error)
}

var errLost = errors.New("leadership lost")

func (l *lateLog) ReportsApplied() bool { return true }

func (l *lateLog) AppendMessage(qid, key uint64, data []byte, done func(error)) {
	l.mu.Lock()
	l.appends = append(l.appends, lateAppend{key: key, data: append([]byte(nil), data...), done: done})
	l.mu.Unlock()
}

func (l *lateLog) DeleteMessage(qid, key uint64) {
	l.mu.Lock()
	l.deletes = append(l.deletes, key)
	l.mu.Unlock()
}

// take removes the first n queued appends (all for n < 0).
func (l *lateLog) take(n int) []lateAppend {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n < 0 || n > len(l.appends) {
		n = len(l.appends)
	}
	out := l.appends[:n:n]
	l.appends = l.appends[n:]
	return out
}

// commit applies the first n queued appends (all for n < 0), in one batch.
func (l *lateLog) commit(n int) {
	as := l.take(n)
	if len(as) == 0 {
		return
	}
	for _, a := range as {
		l.st.AppendMessage(l.q.ID(), a.key, a.data, nil)
	}
	// The deletes queued so far are of committed messages here (the
	// core deletes only what it released, or purged): applied after.
	l.mu.Lock()
	dels := l.deletes
	l.deletes = nil
	l.mu.Unlock()
	for _, k := range dels {
		l.st.DeleteMessage(l.q.ID(), k)
	}
	l.q.LogApplied(as[len(as)-1].key)
	for _, a := range as {
		if a.done != nil {
			a.done(nil)
		}
	}
}

// fail reports the first n queued appends (all for n < 0) failed.
func (l *lateLog) fail(n int) {
	for _, a := range l.take(n) {
		if a.done != nil {
			a.done(errLost)
		}
	}
}

func (l *lateLog) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.appends)
}

// leadQuorum declares quorum queue name and makes it the leader of a
// lateLog.
func leadQuorum(t *testing.T, v *VHost, st *fakeStore, name string, args Table) (*Queue, *lateLog) {
	t.Helper()
	a := Table{"x-queue-type": "quorum"}
	for k, x := range args {
		a[k] = x
	}
	q := declareQ(t, v, name, QueueOpts{Durable: true, Args: a})
	l := &lateLog{st: st, q: q}
	q.BecomeLocal(l, LogState{})
	return q, l
}

func publishConfirmed(t *testing.T, v *VHost, cf *confirms, tag uint64, key, body string, prio uint8) {
	t.Helper()
	res, err := v.Publish(&Message{RoutingKey: key, Body: []byte(body), Props: Properties{DeliveryMode: 2, Priority: prio}},
		PublishOpts{Confirmer: cf, Tag: tag})
	if err != nil || !res.Pending || res.Routed != 1 {
		t.Fatalf("publish %s: %+v %v", body, res, err)
	}
}

func waitConfirm(t *testing.T, cf *confirms, tag uint64) []bool {
	t.Helper()
	eventually(t, 5*time.Second, "a confirm", func() bool { return len(cf.get(tag)) > 0 })
	return cf.get(tag)
}

// TestQuorumLeaderDeliversCommittedOnly: a consumer of a quorum queue led
// here gets nothing until the log reports the appends applied, then gets
// them in order; a later batch likewise.
func TestQuorumLeaderDeliversCommittedOnly(t *testing.T) {
	v, st := newTestVHost(t)
	q, l := leadQuorum(t, v, st, "qc", nil)
	_, s := consume(t, v, "qc", ConsumeOpts{Tag: "c", NoAck: true})
	cf := newConfirms()
	for i, b := range []string{"a", "b", "c"} {
		publishConfirmed(t, v, cf, uint64(i+1), "qc", b, 0)
	}
	if n := s.len(); n != 0 {
		t.Fatalf("%d deliveries before any commit: %v", n, s.bodies())
	}
	if r := ready(q); r != 3 {
		t.Fatalf("ready %d, want the 3 uncommitted", r)
	}
	l.commit(2)
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("after committing a, b: %v", got)
	}
	if got := waitConfirm(t, cf, 2); !reflect.DeepEqual(got, []bool{true}) {
		t.Fatalf("confirm of b %v", got)
	}
	publishConfirmed(t, v, cf, 4, "qc", "d", 0)
	if got := s.bodies(); len(got) != 2 {
		t.Fatalf("delivered before commit: %v", got)
	}
	l.commit(-1)
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("after committing all: %v", got)
	}
	if r := ready(q); r != 0 {
		t.Fatalf("ready %d after delivering all", r)
	}
}

// TestQuorumLeaderGetCommittedOnly: basic.get finds no uncommitted
// message, and its message count leaves them out.
func TestQuorumLeaderGetCommittedOnly(t *testing.T) {
	v, st := newTestVHost(t)
	q, l := leadQuorum(t, v, st, "qg", nil)
	cf := newConfirms()
	publishConfirmed(t, v, cf, 1, "qg", "x", 0)
	publishConfirmed(t, v, cf, 2, "qg", "y", 0)
	if d, ok := q.Get(true); ok {
		t.Fatalf("basic.get took uncommitted %q", d.Msg.Body)
	}
	l.commit(1)
	d, ok := q.Get(false)
	if !ok || string(d.Msg.Body) != "x" || d.Remaining != 0 {
		t.Fatalf("get after commit of x: %v %q remaining %d", ok, d.Msg.Body, d.Remaining)
	}
	if _, ok := q.Get(true); ok {
		t.Fatal("basic.get took uncommitted y")
	}
	// A requeued message is committed: it comes back at once, before y.
	q.Reject([]uint64{d.Seq}, true)
	l.commit(-1)
	if got := getBodies(q); !reflect.DeepEqual(got, []string{"x", "y"}) {
		t.Fatalf("gets %v", got)
	}
}

// TestQuorumLeaderFailedAppendNeverDelivered: an append the log fails
// (leadership lost) is nacked and reaches no consumer, neither before nor
// after the queue becomes a proxy; the committed ones before it do.
func TestQuorumLeaderFailedAppendNeverDelivered(t *testing.T) {
	v, st := newTestVHost(t)
	q, l := leadQuorum(t, v, st, "qf", nil)
	_, s := consume(t, v, "qf", ConsumeOpts{Tag: "c", NoAck: true})
	cf := newConfirms()
	publishConfirmed(t, v, cf, 1, "qf", "ok", 0)
	publishConfirmed(t, v, cf, 2, "qf", "lost1", 0)
	publishConfirmed(t, v, cf, 3, "qf", "lost2", 0)
	l.commit(1)
	l.fail(-1)
	if got := waitConfirm(t, cf, 3); !reflect.DeepEqual(got, []bool{false}) {
		t.Fatalf("confirm of a failed append %v, want a nack", got)
	}
	if got := cf.get(1); !reflect.DeepEqual(got, []bool{true}) {
		t.Fatalf("confirm of the committed one %v", got)
	}
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"ok"}) {
		t.Fatalf("deliveries %v", got)
	}
	// The node loses the leadership: the failed messages are forgotten.
	r := &fakeRemote{}
	q.BecomeProxy(r)
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"ok"}) {
		t.Fatalf("deliveries after becoming a proxy %v", got)
	}
	if rd, _, _ := q.Stats(); rd != 0 {
		t.Fatalf("proxy holds %d ready", rd)
	}
	// It leads again from what the group committed: "ok" only, consumed.
	st.DeleteMessage(q.ID(), storeKey(0, 1, false))
	l2 := &lateLog{st: st, q: q}
	q.BecomeLocal(l2, LogState{Groups: []LogGroup{{Top: 0, MaxKey: storeKey(0, 1, false)}}})
	publishConfirmed(t, v, cf, 4, "qf", "next", 0)
	l2.commit(-1)
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"ok", "next"}) {
		t.Fatalf("deliveries after leading again %v", got)
	}
}

// TestQuorumLeaderPriorities: with priorities, the next delivery is the
// highest priority committed message; an uncommitted higher one waits.
func TestQuorumLeaderPriorities(t *testing.T) {
	v, st := newTestVHost(t)
	q, l := leadQuorum(t, v, st, "qp", Table{"x-max-priority": int64(5)})
	cf := newConfirms()
	publishConfirmed(t, v, cf, 1, "qp", "low1", 1)
	publishConfirmed(t, v, cf, 2, "qp", "low2", 1)
	l.commit(-1)
	publishConfirmed(t, v, cf, 3, "qp", "high", 5)
	d, ok := q.Get(true)
	if !ok || string(d.Msg.Body) != "low1" {
		t.Fatalf("get %v %q, want low1 (high is uncommitted)", ok, d.Msg.Body)
	}
	l.commit(-1)
	if got := getBodies(q); !reflect.DeepEqual(got, []string{"high", "low2"}) {
		t.Fatalf("gets %v", got)
	}
}

// TestQuorumLeaderTTLWaitsForCommit: an uncommitted message does not
// expire; once committed past its deadline it is dead-lettered at once,
// and never delivered.
func TestQuorumLeaderTTLWaitsForCommit(t *testing.T) {
	v, st := newTestVHost(t)
	dead := declareQ(t, v, "dead", QueueOpts{Durable: true})
	q, l := leadQuorum(t, v, st, "qt", Table{"x-message-ttl": int64(20),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
	_, s := consume(t, v, "qt", ConsumeOpts{Tag: "c", NoAck: true, Prefetch: 1})
	cf := newConfirms()
	publishConfirmed(t, v, cf, 1, "qt", "slow", 0)
	time.Sleep(60 * time.Millisecond) // past its TTL, the expiry timer had its chance
	if n := ready(dead); n != 0 {
		t.Fatalf("an uncommitted message was dead-lettered (%d)", n)
	}
	if r := ready(q); r != 1 {
		t.Fatalf("ready %d, want the uncommitted message", r)
	}
	l.commit(-1)
	if n := ready(dead); n != 1 {
		t.Fatalf("dead-lettered %d after the commit, want 1", n)
	}
	if n := s.len(); n != 0 {
		t.Fatalf("an expired message was delivered: %v", s.bodies())
	}
	// One committed in time is delivered.
	publishConfirmed(t, v, cf, 2, "qt", "fast", 0)
	l.commit(-1)
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"fast"}) {
		t.Fatalf("deliveries %v", got)
	}
}

// TestQuorumLeaderDropHeadCountsCommitted: x-max-length with drop-head
// counts and drops committed messages only: an uncommitted publish drops
// nothing until it is committed, and one that fails drops nothing.
func TestQuorumLeaderDropHeadCountsCommitted(t *testing.T) {
	v, st := newTestVHost(t)
	dead := declareQ(t, v, "dead", QueueOpts{Durable: true})
	q, l := leadQuorum(t, v, st, "qm", Table{"x-max-length": int64(1),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
	cf := newConfirms()
	publishConfirmed(t, v, cf, 1, "qm", "first", 0)
	l.commit(-1)
	publishConfirmed(t, v, cf, 2, "qm", "failed", 0)
	if n := ready(dead); n != 0 {
		t.Fatalf("an uncommitted publish dropped the head (%d dead-lettered)", n)
	}
	l.fail(-1)
	waitConfirm(t, cf, 2)
	if n := ready(dead); n != 0 {
		t.Fatalf("a failed publish dropped the head (%d dead-lettered)", n)
	}
	if got := getBodies(q); !reflect.DeepEqual(got, []string{"first"}) {
		t.Fatalf("gets %v, want first alone", got)
	}
	publishConfirmed(t, v, cf, 3, "qm", "third", 0)
	publishConfirmed(t, v, cf, 4, "qm", "fourth", 0)
	if n := ready(dead); n != 0 {
		t.Fatalf("uncommitted publishes dropped %d", n)
	}
	// The log failed for good: the leadership goes, and comes back
	// with what the group holds (first was consumed).
	l.fail(-1)
	q.BecomeProxy(&fakeRemote{})
	l2 := &lateLog{st: st, q: q}
	q.BecomeLocal(l2, LogState{Groups: []LogGroup{{Top: 0, MaxKey: storeKey(0, 4, false)}}})
	publishConfirmed(t, v, cf, 5, "qm", "five", 0)
	publishConfirmed(t, v, cf, 6, "qm", "six", 0)
	l2.commit(1)
	if n := ready(dead); n != 0 || ready(q) != 2 {
		t.Fatalf("one committed of one allowed: %d dead-lettered, %d ready", n, ready(q))
	}
	l2.commit(1)
	if got := getBodies(dead); !reflect.DeepEqual(got, []string{"five"}) {
		t.Fatalf("dead-lettered %v, want five", got)
	}
	if got := getBodies(q); !reflect.DeepEqual(got, []string{"six"}) {
		t.Fatalf("left %v, want six", got)
	}
}

// TestClassicQueueUngated: a classic queue over the same kind of store
// delivers at publish, before its store reports the write durable.
func TestClassicQueueUngated(t *testing.T) {
	v, st := newTestVHost(t)
	st.Hold = true
	declareQ(t, v, "cq", QueueOpts{Durable: true})
	_, s := consume(t, v, "cq", ConsumeOpts{Tag: "c", NoAck: true})
	cf := newConfirms()
	publishConfirmed(t, v, cf, 1, "cq", "m", 0)
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"m"}) {
		t.Fatalf("deliveries %v", got)
	}
	st.Release()
	waitConfirm(t, cf, 1)
}

// TestQuorumLeaderBrowseCommittedOnly: management's browse shows the
// committed messages only.
func TestQuorumLeaderBrowseCommittedOnly(t *testing.T) {
	v, st := newTestVHost(t)
	q, l := leadQuorum(t, v, st, "qb", nil)
	cf := newConfirms()
	publishConfirmed(t, v, cf, 1, "qb", "one", 0)
	publishConfirmed(t, v, cf, 2, "qb", "two", 0)
	l.commit(1)
	bodies := func() []string {
		p, err := q.Browse(BrowseOpts{Count: 10, Scan: 10})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range p.Messages {
			out = append(out, string(m.Msg.Body))
		}
		if !p.End {
			t.Fatalf("browse of %v not at its end", out)
		}
		return out
	}
	if got := bodies(); !reflect.DeepEqual(got, []string{"one"}) {
		t.Fatalf("browsed %v, want one", got)
	}
	l.commit(-1)
	if got := bodies(); !reflect.DeepEqual(got, []string{"one", "two"}) {
		t.Fatalf("browsed %v", got)
	}
}

// TestQuorumLeaderPagesCommitted: a lazy quorum queue keeps uncommitted
// messages in memory, pages them out once committed, and delivers the
// whole backlog in order, read back from the store.
func TestQuorumLeaderPagesCommitted(t *testing.T) {
	v, st := newTestVHost(t)
	q, l := leadQuorum(t, v, st, "ql", Table{"x-queue-mode": "lazy"})
	cf := newConfirms()
	const n = 1000
	for i := 0; i < n; i++ {
		publishConfirmed(t, v, cf, uint64(i+1), "ql", strconv.Itoa(i), 0)
		if i == n/2 {
			l.commit(-1)
		}
	}
	if mem := q.Status().ReadyRAM; mem < n/2-1 {
		t.Fatalf("%d in memory: uncommitted messages were paged out", mem)
	}
	l.commit(-1)
	if st := q.Status(); st.ReadyRAM > 2*tailMsgs || st.Ready != n {
		t.Fatalf("%d of %d ready in memory after the commit", st.ReadyRAM, st.Ready)
	}
	getCounting(t, q, 0, n)
	if st.Reads == 0 {
		t.Fatal("nothing was read back from the store")
	}
}

// behindLog is a lateLog whose FSM writes behind: commit applies (the
// queue may deliver) but puts nothing in the store; store writes what was
// committed and reports it (LogStored), as quorum.FSM's OnStored does.
type behindLog struct {
	lateLog
	unstored []lateAppend
}

func (l *behindLog) commit(n int) {
	as := l.take(n)
	if len(as) == 0 {
		return
	}
	l.unstored = append(l.unstored, as...)
	l.q.LogApplied(as[len(as)-1].key)
	for _, a := range as {
		if a.done != nil {
			a.done(nil)
		}
	}
}

func (l *behindLog) store() {
	for _, a := range l.unstored {
		l.st.AppendMessage(l.q.ID(), a.key, a.data, nil)
	}
	l.q.LogStored(l.unstored[len(l.unstored)-1].key)
	l.unstored = nil
}

// TestQuorumLeaderPagesStoredOnly: with an FSM that writes behind, a
// committed message is delivered at once but paged out only once the FSM
// reports it in the store: a page read back finds every message.
func TestQuorumLeaderPagesStoredOnly(t *testing.T) {
	v, st := newTestVHost(t)
	q := declareQ(t, v, "qb", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum", "x-queue-mode": "lazy"}})
	l := &behindLog{lateLog: lateLog{st: st, q: q}}
	q.BecomeLocal(l, LogState{StoredSeparately: true})
	cf := newConfirms()
	const n = 400
	for i := 0; i < n; i++ {
		publishConfirmed(t, v, cf, uint64(i+1), "qb", strconv.Itoa(i), 0)
	}
	l.commit(-1)
	if s := q.Status(); s.ReadyRAM != n {
		t.Fatalf("%d of %d in memory: messages not yet in the store were paged out", s.ReadyRAM, n)
	}
	// The first one is deliverable (committed) although not stored.
	d, ok := q.Get(false)
	if !ok || string(d.Msg.Body) != "0" {
		t.Fatalf("get before the store write: %v %q", ok, d.Msg.Body)
	}
	q.Ack(d.Seq)
	l.store() // LogStored pages out what waited (nobody holds the lock)
	if s := q.Status(); s.ReadyRAM > 2*tailMsgs || s.Ready != n-1 {
		t.Fatalf("%d of %d ready in memory after the store write", s.ReadyRAM, s.Ready)
	}
	// When LogStored finds the lock taken, the next batch's LogApplied
	// pages out what waited.
	for i := n + 1; i <= n+2*tailMsgs; i++ {
		publishConfirmed(t, v, cf, uint64(i), "qb", strconv.Itoa(i-1), 0)
	}
	l.commit(-1)
	q.mu.Lock()
	l.store()
	q.mu.Unlock()
	if s := q.Status(); s.ReadyRAM < 2*tailMsgs {
		t.Fatalf("%d in memory: paged out under a lock LogStored did not take", s.ReadyRAM)
	}
	publishConfirmed(t, v, cf, n+2*tailMsgs+1, "qb", strconv.Itoa(n+2*tailMsgs), 0)
	l.commit(-1)
	if s := q.Status(); s.ReadyRAM > 2*tailMsgs || s.Ready != n+2*tailMsgs {
		t.Fatalf("%d of %d ready in memory after the next batch", s.ReadyRAM, s.Ready)
	}
	getCounting(t, q, 1, n+2*tailMsgs)
	if st.Reads == 0 {
		t.Fatal("nothing was read back from the store")
	}
}

// getCounting takes every message of q (basic.get) and checks that they
// are n bodies counting up from first.
func getCounting(t *testing.T, q *Queue, first, n int) {
	t.Helper()
	got := getBodies(q)
	if len(got) != n {
		t.Fatalf("got %d of %d", len(got), n)
	}
	for i, b := range got {
		if b != strconv.Itoa(first+i) {
			t.Fatalf("get %d: %q", i, b)
		}
	}
}
