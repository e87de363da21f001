package exchange

import (
	"unsafe"
)

// Paging: a classic queue's memory is bounded whatever its backlog.
//
// Each priority level is a lane of three parts, in seq order:
//
//	head  in memory: the next messages to deliver (the window)
//	mid   on disk only: a count, a byte sum and the store key of the first
//	tail  in memory: the newest messages, not yet paged out
//
// While a lane is not paging (mid and tail empty) a message goes to head,
// until head holds the queue's in-memory limit. From then on messages go
// to tail, and tail is paged out from its oldest end into mid once it
// passes a small buffer (a transient message is written to the store only
// then, marked as a page so that a restart drops it, and only under memory
// pressure or with a per-queue in-memory limit: pagesTransient). head is refilled from
// the store in seq-ordered batches as it drains (read ahead at half the
// window), and from tail directly once mid is empty. Everything stored with
// a key at or above mid's first key and not in tail is mid: seqs only grow,
// a message leaves head only from its front (delivered, expired, dropped)
// and a requeued message goes back into head, below mid.
//
// A restart reads keys, not bodies: every lane starts as mid alone, its
// count and bytes from the store's key scan (bytes are the store's
// estimate of each record's size, corrected as the messages are read).
//
// Store keys: lane<<56 | seq<<1 | page. Seqs stay below 1<<48 (the epoch
// shift), so the keys of a lane are in seq order and a lane's keys are one
// range of the queue's. A quorum queue led here keys its log's messages
// the same way: its FSM writes them to the node's store under those keys
// once a majority has them (never as pages: every message of a quorum
// queue is in its log), and the queue pages them like a classic queue's,
// but only once they are there (logStored).

const (
	laneShift = 56
	// Defaults of the per-queue in-memory window (conf queues.window_*).
	defaultWindowMsgs  = 32768
	defaultWindowBytes = 8 << 20
	defaultMemBudget   = 128 << 20 // conf queues.memory_budget
	// tail is paged out past these.
	tailMsgs  = 256
	tailBytes = 1 << 20
	// A refill reads at least this many messages (x-queue-mode lazy and
	// x-max-in-memory-length 0 still read ahead that much).
	minReadAhead = 64
	minReadBytes = 256 << 10
	// A refill from the store fills head to at most maxReadMsgs messages
	// and maxRead bytes, however large the window: what a consumer reaches
	// on disk is read in batches and kept in a small head (reading back
	// toward the 32,768 window, 4,096 at a time, drained a backlog of
	// 16-byte messages 10% slower than a 2,048 one), while messages that
	// never left memory may fill head up to the window.
	maxRead     = 4 << 20
	maxReadMsgs = 2048
)

func storeKey(lane int, seq uint64, page bool) uint64 {
	k := uint64(lane)<<laneShift | (seq&seqMask)<<1
	if page {
		k |= 1
	}
	return k
}

// laneEnd is the key past every key of lane i.
func laneEnd(i int) uint64 { return storeKey(i, seqMask, true) + 1 }

func splitStoreKey(k uint64) (lane int, seq uint64, page bool) {
	return int(k >> laneShift), (k >> 1) & seqMask, k&1 == 1
}

// lane is one priority level's ready messages.
type lane struct {
	head      deque
	headBytes int64
	mid       int
	midBytes  int64
	from      uint64 // store key of mid's first message
	tail      deque
	tailBytes int64
}

func (l *lane) n() int { return l.head.n + l.mid + l.tail.n }

// readyList holds ready messages, one lane per priority level.
type readyList struct {
	s *queueState
	// levels has a lane per priority (len 1 without x-max-priority):
	// nil once Trim found every lane empty, as an idle MQTT device's
	// queue is when it parks (a lane is 120 bytes), until a message
	// enters again (lanes).
	levels []lane
	n      int
	bytes  int64 // body bytes of every ready message (estimated for recovered ones)
	mem    int64 // body bytes held in memory (head and tail)
	// memReported is the part of mem counted in the broker's memUsed,
	// which is brought up to date in steps of memQuantum.
	memReported int64
	// What recovery flagged and a gated queue's uncommitted messages are
	// the state's rare part (stateRare).
}

// newReadyList makes the lanes at once (s.a set): a first publish makes
// none, as it did not before they could be forgotten.
func newReadyList(s *queueState) readyList {
	r := readyList{s: s}
	r.lanes()
	return r
}

// nLevels is the number of lanes: the queue's x-max-priority + 1.
func (r *readyList) nLevels() int { return r.s.a.maxPriority + 1 }

// lanes is r.levels, made if there are none.
func (r *readyList) lanes() []lane {
	if r.levels == nil {
		r.levels = make([]lane, r.nLevels())
	}
	return r.levels
}

// dropLanes forgets the lanes if every one is empty (Trim).
func (r *readyList) dropLanes() {
	if r.n != 0 {
		return
	}
	for i := range r.levels {
		if l := &r.levels[i]; l.n() != 0 || l.headBytes != 0 || l.midBytes != 0 || l.tailBytes != 0 {
			return
		}
	}
	r.levels = nil
}

func (r *readyList) laneOf(e *entry) int {
	return min(int(e.msg.Props.Priority), r.nLevels()-1)
}

// pages reports whether the queue's messages are in the node's store and
// so may be paged: not a proxy's.
func (r *readyList) pages() bool {
	return r.s.env.envPages()
}

// canPage reports whether e may leave memory: it is in the store, or will
// be by the time it is read (the store's reads see its queued writes).
// A quorum queue's message is there once its log's FSM applied it.
func (r *readyList) canPage(e *entry) bool {
	return r.s.env.envCanPage(e.seq)
}

// window is the queue's in-memory limit per lane (messages, bytes).
func (r *readyList) window() (int, int64) {
	a := r.s.a
	msgs, bytes := r.s.env.envWindow()
	if a.memLen >= 0 && a.memLen < msgs {
		msgs = a.memLen
	}
	if a.memBytes >= 0 && a.memBytes < bytes {
		bytes = a.memBytes
	}
	return int(msgs), bytes
}

// pressure reports that queues must not keep more in memory: the node is
// short of memory, or the queues' bodies in memory pass the budget.
func (r *readyList) pressure() bool {
	return r.s.env.envPressure()
}

// memQuantum is the step in which a queue's in-memory bytes are counted
// in the broker's total: an atomic add every few messages, not each one,
// at most memQuantum off per queue.
const memQuantum = 256

func (r *readyList) addMem(d int64) {
	r.mem += d
	if x := r.mem - r.memReported; x >= memQuantum || x <= -memQuantum || (r.mem == 0 && x != 0) {
		r.s.fx.memDelta += x
		r.memReported = r.mem
	}
}

// push appends a new message (publish) or a proxy's delivery.
func (r *readyList) push(e entry) {
	i := r.laneOf(&e)
	l := &r.lanes()[i]
	size := int64(len(e.msg.Body))
	r.n++
	r.bytes += size
	r.addMem(size + msgOverhead)
	if r.s.gated() {
		r.s.rare.pending.push(e.seq, size)
	}
	if !r.pages() {
		l.head.pushBack(e)
		l.headBytes += size
		return
	}
	wm, wb := r.window()
	if l.mid == 0 && l.tail.n == 0 && l.head.n < wm && l.headBytes+size <= wb && !r.pressure() {
		l.head.pushBack(e)
		l.headBytes += size
		return
	}
	l.tail.pushBack(e)
	l.tailBytes += size
	r.spill(i, l)
}

// insert puts a returned message back at its place in seq order: in head,
// whose seqs are below every paged one.
func (r *readyList) insert(e entry) {
	l := &r.lanes()[r.laneOf(&e)]
	size := int64(len(e.msg.Body))
	l.head.insert(e)
	l.headBytes += size
	r.n++
	r.bytes += size
	r.addMem(size + msgOverhead)
}

// spill pages tail out from its oldest end while it is over its buffer
// (or at once under memory pressure). A queue without consumers under
// pressure pages out its head too, but for redelivered messages.
func (r *readyList) spill(i int, l *lane) {
	press := r.pressure()
	for l.tail.n > 0 && (press || (l.tail.n > tailMsgs || l.tailBytes > tailBytes) && r.pagesTransient(l.tail.at(0))) && r.canPage(l.tail.at(0)) {
		e := l.tail.popFront()
		size := int64(len(e.msg.Body))
		l.tailBytes -= size
		r.pageOut(i, l, &e, size)
		if l.mid == 1 {
			l.from = r.s.storeKey(&e)
		}
	}
	if press && r.s.env.envConsumers() == 0 && l.tail.n == 0 {
		for l.head.n > 0 && l.head.at(l.head.n-1).deliveries == 0 && r.canPage(l.head.at(l.head.n-1)) {
			e := l.head.popBack()
			size := int64(len(e.msg.Body))
			l.headBytes -= size
			r.pageOut(i, l, &e, size)
			l.from = r.s.storeKey(&e)
		}
	}
	// What went to the store leaves no room behind: a small buffer
	// stays with a deque that empties (deque.release), which for a
	// queue that pages is room it will not use soon — with 100,000
	// queues, most of the memory their state takes.
	l.tail.shrink()
	l.head.shrink()
}

// pagesTransient reports whether e may be paged out without memory
// pressure: it is stored already (paging it only frees memory), or the
// queue has an in-memory limit of its own (x-max-in-memory-length or
// -bytes, lazy mode, or their policy keys). A transient message past the
// node-wide window otherwise stays in memory until the queues' memory
// budget or the memory watch says otherwise: writing it to the store and
// reading it back costs several times what delivering it does, so a
// consumer a little behind its publisher would fall further behind while
// the broker pages (RabbitMQ 3.10's classic queues also page transient
// messages only under memory pressure). A tail whose oldest message stays
// keeps the newer ones behind it too (mid is one key range).
func (r *readyList) pagesTransient(e *entry) bool {
	return e.stored || r.s.a.memLen >= 0 || r.s.a.memBytes >= 0
}

// pageOut makes e part of mid, writing it to the store if it is not there.
func (r *readyList) pageOut(i int, l *lane, e *entry, size int64) {
	if !e.stored {
		e.stored, e.page = true, true
		buf := encodePool.Get().(*[]byte)
		data := encodeMessage(e.msg, e.msg.ts, (*buf)[:0])
		r.s.fx.op(storeOp{kind: opPage, key: r.s.storeKey(e), data: data, pooled: buf})
	}
	l.mid++
	l.midBytes += size
	r.addMem(-size - msgOverhead)
}

// readTarget is what a refill from the store fills a lane's head to:
// the window, at least a read-ahead, at most maxReadMsgs and maxRead.
func (r *readyList) readTarget() (int, int64) {
	wm, wb := r.window()
	return min(max(wm, minReadAhead), maxReadMsgs), min(max(wb, minReadBytes), maxRead)
}

// refill reads the next batch of mid into head, or moves tail into head
// once mid is empty, until head holds the window.
func (r *readyList) refill(i int, l *lane) {
	if !r.pages() {
		return
	}
	wm, wb := r.window()
	wm, wb = max(wm, minReadAhead), max(wb, minReadBytes)
	rm, rb := r.readTarget()
	if r.pressure() && r.s.env.envConsumers() == 0 {
		wm, rm = 1, 1 // a look at the head (TTL), no read-ahead
	}
	if l.mid > 0 {
		want := min(l.mid, rm-l.head.n)
		budget := rb - l.headBytes
		if want <= 0 || budget <= 0 {
			return // head holds enough already
		}
		got := 0
		s := r.s
		recMax := s.recMax()
		next := l.from
		err := s.env.envRead(l.from, func(k uint64, data []byte) bool {
			ln, seq, page := splitStoreKey(k)
			if ln != i {
				return false
			}
			next = k + 1
			est := int64(len(data)) // recovered: counted by the record's size
			m, _, err := decodeMessage(data)
			if err != nil {
				s.fx.more().notes = append(s.fx.more().notes, stateNote{seq: seq, err: err})
				s.issueDelete(k)
				l.mid--
				r.n--
				if seq > recMax {
					est = 0 // unknown: the lane's sum is reset when it empties
				}
				l.midBytes -= est
				r.bytes -= est
				return l.mid > 0
			}
			size := int64(len(m.Body))
			if seq > recMax {
				est = size
			}
			if m.expiresAt != 0 {
				s.fx.expiring = true
			}
			e := entry{msg: m, seq: seq, stored: true, page: page}
			if rr := s.rare; rr != nil && (seq <= rr.recAll || rr.recSeen[seq]) {
				e.deliveries = 1
				delete(rr.recSeen, seq)
				e.deliveries += s.env.envReturns(k)
			}
			l.head.pushBack(e)
			l.headBytes += size
			l.mid--
			l.midBytes -= est
			r.bytes += size - est
			r.addMem(size + msgOverhead)
			got++
			budget -= size
			return l.mid > 0 && got < want && budget > 0
		})
		l.from = next
		if l.mid == 0 {
			r.bytes -= l.midBytes
			l.midBytes = 0
		}
		if err != nil {
			s.fx.more().notes = append(s.fx.more().notes, stateNote{err: err})
		}
		if err == nil && l.mid > 0 && got < want && budget > 0 {
			// The store holds fewer messages than counted (the store
			// sees queued writes too, so they are gone): say so and
			// count what is there.
			s.fx.more().notes = append(s.fx.more().notes, stateNote{missing: l.mid})
			r.n -= l.mid
			r.bytes -= l.midBytes
			l.mid, l.midBytes = 0, 0
		}
		if l.mid > 0 {
			return
		}
	}
	for l.tail.n > 0 && l.head.n < wm && l.headBytes < wb {
		e := l.tail.popFront()
		size := int64(len(e.msg.Body))
		l.tailBytes -= size
		l.head.pushBack(e)
		l.headBytes += size
	}
}

// headOf makes lane i's head non-empty if the lane has messages, and
// returns it, or nil if the lane's next messages cannot be read now.
func (r *readyList) headOf(i int) *deque {
	l := &r.levels[i]
	if l.head.n == 0 && (l.mid > 0 || l.tail.n > 0) {
		r.refill(i, l)
	}
	if l.head.n == 0 {
		return nil
	}
	return &l.head
}

// frontLane is the lane holding the next message to deliver, -1 if none.
func (r *readyList) frontLane() int {
	if r.s.gated() {
		for i := len(r.levels) - 1; i >= 0; i-- {
			if r.frontReleased(&r.levels[i]) {
				return i
			}
		}
		return -1
	}
	for i := len(r.levels) - 1; i >= 0; i-- {
		if r.levels[i].n() > 0 {
			return i
		}
	}
	return -1
}

func (r *readyList) peek() *entry {
	i := r.frontLane()
	if i < 0 {
		return nil
	}
	if d := r.headOf(i); d != nil {
		return d.peek()
	}
	return nil
}

func (r *readyList) pop() (entry, bool) {
	i := r.frontLane()
	if i < 0 {
		return entry{}, false
	}
	return r.popLane(i)
}

func (r *readyList) popLane(i int) (entry, bool) {
	d := r.headOf(i)
	if d == nil {
		return entry{}, false
	}
	l := &r.levels[i]
	e := d.popFront()
	size := int64(len(e.msg.Body))
	l.headBytes -= size
	r.n--
	r.bytes -= size
	r.addMem(-size - msgOverhead)
	if l.n() == 0 {
		// Estimates of recovered sizes never leave a sum behind.
		r.bytes -= l.midBytes
		l.midBytes = 0
	} else if l.mid > 0 || l.tail.n > 0 {
		// Read ahead once head is down to half of what a refill fills
		// it to, by count and by bytes: whichever limit binds, a refill
		// then brings half of that, not one message per pop.
		if wm, wb := r.readTarget(); l.head.n < wm/2 && l.headBytes < wb/2 {
			r.refill(i, l)
		}
	}
	if r.n == 0 {
		r.bytes = 0
	}
	return e, true
}

// popOldest removes the head of the lowest priority level (x-max-length drops
// from the head; with priorities, RabbitMQ drops the lowest priority first).
func (r *readyList) popOldest() (entry, bool) {
	gated := r.s.gated()
	for i := range r.levels {
		if l := &r.levels[i]; l.n() > 0 && (!gated || r.frontReleased(l)) {
			return r.popLane(i)
		}
	}
	return entry{}, false
}

// clear empties the list. It returns the messages held in memory; those
// paged out are deleted from the store here when drop is set (a purge),
// else forgotten (the queue is deleted, or its messages live elsewhere now).
func (r *readyList) clear(drop bool) []entry {
	out := make([]entry, 0, r.mem/64+1)
	for i := range r.levels {
		l := &r.levels[i]
		for l.head.n > 0 {
			out = append(out, l.head.popFront())
		}
		if drop && l.mid > 0 && r.pages() {
			// Everything of the lane stored from mid's first key on is
			// mid or tail (whose stored records go too): one range.
			r.s.fx.op(storeOp{kind: opDeleteRange, key: l.from, arg: laneEnd(i), count: l.mid})
		}
		for l.tail.n > 0 {
			out = append(out, l.tail.popFront())
		}
		*l = lane{}
	}
	r.addMem(-r.mem)
	r.s.fx.memDelta -= r.memReported
	r.memReported = 0
	r.n, r.bytes = 0, 0
	if rr := r.s.rare; rr != nil {
		rr.recSeen = nil
		rr.pending.reset()
	}
	return out
}

// frontReleased reports whether lane l's next message is committed, for a
// gated queue (commit.go): its committed messages come first, and mid
// holds only committed ones. False for an empty lane.
func (r *readyList) frontReleased(l *lane) bool {
	switch {
	case l.head.n > 0:
		return r.s.released(l.head.at(0))
	case l.mid > 0:
		return true
	case l.tail.n > 0:
		return r.s.released(l.tail.at(0))
	}
	return false
}

// inMemory is the number of ready messages held in memory.
func (r *readyList) inMemory() int {
	n := 0
	for i := range r.levels {
		n += r.levels[i].head.n + r.levels[i].tail.n
	}
	return n
}

// msgOverhead is what a message held in memory costs besides its body:
// its entry and its Message (headers, when it has them, come on top). The
// queues' memory budget counts it with the body: with small bodies it is
// most of the cost.
const msgOverhead = int64(unsafe.Sizeof(entry{}) + unsafe.Sizeof(Message{}))

// storeKey is e's key in q's message log.
func (q *Queue) storeKey(e *entry) uint64 {
	return storeKey(q.ready.laneOf(e), e.seq, e.page)
}
