package exchange

import (
	"math/rand"
	"sort"
	"strconv"
	"testing"
)

// stateEnv is a queueEnv with no Queue, broker or store behind it: its
// store is a map that only the state's effects write (carried out as
// Queue.flush would), and its facts are fields the test sets.
type stateEnv struct {
	s        *queueState
	store    map[uint64][]byte
	winMsgs  int64
	winBytes int64
	press    bool
	cons     int
	mem      int64 // the memory gauge, from the effects' memDelta
	appends  int   // appends whose done was called
	reads    int
}

func (v *stateEnv) envWindow() (int64, int64) { return v.winMsgs, v.winBytes }
func (v *stateEnv) envPressure() bool         { return v.press }
func (v *stateEnv) envPages() bool            { return true }
func (v *stateEnv) envCanPage(uint64) bool    { return true }
func (v *stateEnv) envReturns(uint64) uint32  { return 0 }
func (v *stateEnv) envConsumers() int         { return v.cons }
func (v *stateEnv) envExpiring() bool         { return false }
func (v *stateEnv) envRetry(entry) bool       { return false }
func (v *stateEnv) keys() []uint64            { return sortedKeys(v.store) }
func (v *stateEnv) envKeys(from uint64, fn func(uint64, int64) bool) error {
	v.flush()
	for _, k := range v.keys() {
		if k >= from && !fn(k, int64(len(v.store[k]))) {
			break
		}
	}
	return nil
}

func (v *stateEnv) envRead(from uint64, fn func(uint64, []byte) bool) error {
	v.flush()
	v.reads++
	for _, k := range v.keys() {
		if k >= from && !fn(k, v.store[k]) {
			break
		}
	}
	return nil
}

func sortedKeys(m map[uint64][]byte) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// flush carries out the state's effects the way Queue.flush does.
func (v *stateEnv) flush() {
	f := &v.s.fx
	for _, o := range f.ops {
		switch o.kind {
		case opAppend, opPage:
			v.store[o.key] = append([]byte(nil), o.data...)
			if o.done != nil {
				o.done(nil)
			}
		case opDelete:
			delete(v.store, o.key)
		case opDeleteRange:
			for k := range v.store {
				if k >= o.key && k < o.arg {
					delete(v.store, k)
				}
			}
		}
	}
	f.ops = f.ops[:0]
	v.mem += f.memDelta
	f.memDelta = 0
	f.rare, f.acks = nil, 0
}

func newTestState(maxPriority int) (*queueState, *stateEnv) {
	v := &stateEnv{store: map[uint64][]byte{}, winMsgs: 8, winBytes: 1 << 20}
	a, _ := parseQueueArgs(nil)
	s := &queueState{env: v, a: &a, nextSeq: 1}
	a.maxPriority = maxPriority
	s.ready = newReadyList(s)
	v.s = s
	return s, v
}

// TestQueueStateAlone drives a queue's state with random commands —
// publishes of persistent and transient messages, deliveries, acks,
// requeues, rejects, purges, memory pressure on and off, kills and
// restarts (a new state restored from the store's keys) — with nothing
// but a map for a store, and checks it against a model after each: the
// next delivery is the lowest ready seq (requeued ones go back to their
// place), the counts agree, what is in memory stays bounded while the
// backlog is paged, and the store holds exactly the stored messages not
// yet settled or purged (persistent ones from their publish on, transient
// ones once paged out).
func TestQueueStateAlone(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(strconv.FormatInt(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			s, v := newTestState(0)
			type msg struct {
				persistent bool
				delivered  int
			}
			ready := map[uint64]*msg{}
			unacked := map[uint64]*msg{}
			confirmed, restarts := 0, 0
			stored := func(seq uint64) bool { // in the state's view: stored, not settled
				if m, ok := ready[seq]; ok {
					return m.persistent
				}
				m, ok := unacked[seq]
				return ok && m.persistent
			}
			for step := 0; step < 6000; step++ {
				switch op := rng.Intn(100); {
				case op < 50: // publish
					m := &Message{Body: make([]byte, 1+rng.Intn(300))}
					rng.Read(m.Body)
					p := rng.Intn(2) == 0
					if p {
						m.Props.DeliveryMode = 2
					}
					e := entry{msg: m, seq: s.nextSeq, stored: p}
					s.nextSeq++
					var data []byte
					var done func(error)
					if p {
						data = encodeMessage(m, 0, nil)
						done = func(error) { confirmed++ }
					}
					if !s.cmdAdmit(e) {
						t.Fatal("refused with no limits")
					}
					s.cmdEnqueue(e, data, done)
					ready[e.seq] = &msg{persistent: p}
				case op < 75: // deliver
					e, ok := s.cmdTake(0)
					if !ok {
						if len(ready) != 0 {
							t.Fatalf("step %d: nothing taken with %d ready", step, len(ready))
						}
						continue
					}
					low := uint64(1 << 62)
					for seq := range ready {
						low = min(low, seq)
					}
					if e.seq != low {
						t.Fatalf("step %d: took seq %d, lowest ready is %d", step, e.seq, low)
					}
					m := ready[e.seq]
					delete(ready, e.seq)
					m.delivered++
					if int(e.deliveries) != m.delivered {
						t.Fatalf("step %d: seq %d delivered %d times, entry says %d", step, e.seq, m.delivered, e.deliveries)
					}
					if rng.Intn(5) == 0 { // no ack
						s.dropStored(&e)
						continue
					}
					s.cmdDelivered(e, nil)
					unacked[e.seq] = m
				case op < 90: // ack
					for seq := range unacked {
						if _, ok := s.cmdSettle(seq); !ok {
							t.Fatalf("step %d: settle of unacked %d refused", step, seq)
						}
						delete(unacked, seq)
						break
					}
				case op < 97: // requeue or reject
					for seq, m := range unacked {
						requeue := rng.Intn(3) != 0
						if !s.cmdReturn(seq, requeue) {
							t.Fatalf("step %d: return of unacked %d refused", step, seq)
						}
						delete(unacked, seq)
						if requeue {
							ready[seq] = m
						}
						break
					}
				case op < 98 && rng.Intn(4) == 0: // kill and restart
					restarts++
					s = restartState(v, s)
					for seq, m := range unacked {
						ready[seq] = m
					}
					clear(unacked)
					for seq, m := range ready {
						if !m.persistent {
							delete(ready, seq) // transient: gone with the process
							continue
						}
						m.delivered = 1 // flagged redelivered when read back
					}
				case op < 98:
					if n := s.cmdPurge(); n != len(ready) {
						t.Fatalf("step %d: purged %d, %d were ready", step, n, len(ready))
					}
					clear(ready)
				default:
					v.press = !v.press
				}
				v.flush()
				if s.ready.n != len(ready) || s.unacked.len() != len(unacked) {
					t.Fatalf("step %d: state has %d ready / %d unacked, model %d / %d", step, s.ready.n, s.unacked.len(), len(ready), len(unacked))
				}
				// head: at most a refill's worth besides the requeued;
				// tail: its buffer.
				if in := s.ready.inMemory(); in > maxReadMsgs+tailMsgs+1+len(unacked)+8 {
					t.Fatalf("step %d: %d messages in memory of %d ready", step, in, len(ready))
				}
				for _, k := range v.keys() {
					_, seq, page := splitStoreKey(k)
					_, r := ready[seq]
					_, u := unacked[seq]
					if !r && !u {
						t.Fatalf("step %d: store holds settled or purged seq %d (page %v)", step, seq, page)
					}
				}
				for seq := range ready {
					if stored(seq) {
						if _, ok := v.store[storeKey(0, seq, false)]; !ok {
							t.Fatalf("step %d: persistent ready seq %d not in the store", step, seq)
						}
					}
				}
			}
			// Drain: everything left comes out in order, and the store and
			// the memory gauge end empty.
			for seq := range unacked {
				s.cmdSettle(seq)
			}
			var last uint64
			for {
				e, ok := s.cmdTake(0)
				if !ok {
					break
				}
				if e.seq <= last {
					t.Fatalf("drain: seq %d after %d", e.seq, last)
				}
				last = e.seq
				delete(ready, e.seq)
				s.dropStored(&e)
				v.flush()
			}
			v.flush()
			if len(ready) != 0 || len(v.store) != 0 || s.ready.n != 0 {
				t.Fatalf("after the drain: model %d ready, store %d records, state %d", len(ready), len(v.store), s.ready.n)
			}
			if v.mem != 0 || s.ready.mem != 0 {
				t.Fatalf("memory gauge %d, state's in-memory bytes %d (reported %d)", v.mem, s.ready.mem, s.ready.memReported)
			}
			if v.reads == 0 {
				t.Fatal("never read from the store: nothing was paged")
			}
			if restarts == 0 {
				t.Fatal("never restarted")
			}
			t.Logf("confirmed %d, store reads %d, restarts %d", confirmed, v.reads, restarts)
		})
	}
}

// restartState is what a kill and a restart leave of s: the records in
// v's store, transient pages deleted, and a new state built from their
// keys alone by the commands recovery uses (cmdRestore,
// cmdFlagRestored), every message flagged redelivered.
func restartState(v *stateEnv, s *queueState) *queueState {
	v.flush() // what s issued reached the store (Queue.unlock flushes)
	for k := range v.store {
		if _, _, page := splitStoreKey(k); page {
			delete(v.store, k)
		}
	}
	v.mem = 0 // the gauge was the old process's
	n := &queueState{env: v, a: s.a, nextSeq: 1}
	n.ready = newReadyList(n)
	v.s = n
	var first, maxSeq uint64
	var bytes int64
	keys := v.keys()
	for i, k := range keys {
		if i == 0 {
			first = k
		}
		_, seq, _ := splitStoreKey(k)
		maxSeq = max(maxSeq, seq)
		bytes += int64(len(v.store[k]))
	}
	if len(keys) > 0 {
		n.cmdRestore(0, first, len(keys), bytes, maxSeq)
	}
	n.cmdFlagRestored(n.recMax(), nil)
	return n
}
