package store

import (
	"slices"
	"sync"
	"testing"
)

// TestCancelAndRelease: a delete cancels its message's append while that
// is in pend or aged (a put's delete is kept, to reach the disk); the done
// callbacks of cancelled appends are handed to the notifier as soon as
// every op issued before them is cancelled — in issue order, up to the
// first op still to be written, never while a batch is being written —
// and the read path sees a cancelled append as deleted.
func TestCancelAndRelease(t *testing.T) {
	b := &Badger{opts: BadgerOptions{MaxPendingBytes: 1 << 20}, pend: new(batch)}
	b.notifyCond = sync.NewCond(&b.notifyMu)
	var called []uint64
	app := func(seq uint64, put bool) {
		b.appendMessage(1, seq, []byte{byte(seq)}, func(err error) {
			if err != nil {
				t.Errorf("done %d: %v", seq, err)
			}
			called = append(called, seq)
		}, put)
	}
	// What the notifier has been handed so far, called in order.
	notify := func() {
		t.Helper()
		b.notifyMu.Lock()
		q := b.notifyQ
		b.notifyQ = nil
		b.notifyMu.Unlock()
		for _, c := range q {
			if !c.early {
				t.Fatal("a written batch handed over by a delete")
			}
			b.callbacks(c)
		}
	}
	want := func(step string, seqs ...uint64) {
		t.Helper()
		notify()
		if !slices.Equal(called, seqs) {
			t.Fatalf("%s: done called for %v, want %v", step, called, seqs)
		}
	}
	app(1, false)
	app(2, true)
	app(3, false)
	b.aged, b.pend = b.pend, new(batch)
	app(4, false)
	app(5, false)

	b.DeleteMessage(1, 1)
	want("head of aged cancelled", 1)
	b.DeleteMessage(1, 3)
	want("behind an append still to be written", 1)
	b.DeleteMessage(1, 2) // a put: its delete is kept
	want("the put's append cancelled", 1, 2, 3)
	if n := len(b.pend.ops); n != 3 || b.pend.ops[2].kind != opDelete || b.pend.ops[2].seq != 2 {
		t.Fatalf("pend %+v: the put's delete must be queued", b.pend.ops)
	}
	b.writing = new(batch)
	b.DeleteMessage(1, 4)
	b.DeleteMessage(1, 5)
	want("while a batch is being written", 1, 2, 3)
	b.writing = nil
	b.notifyMu.Lock()
	b.releaseLocked()
	b.notifyMu.Unlock()
	// The put's delete, still to be written, holds back nothing issued
	// before it.
	want("after the write", 1, 2, 3, 4, 5)
	if got := b.stats.cancelled.Load(); got != 5 {
		t.Fatalf("cancelled %d, want 5", got)
	}
	for _, c := range []*batch{b.aged, b.pend} {
		for _, o := range c.ops {
			if o.kind == opAppend && !o.skip {
				t.Fatalf("append %d not cancelled", o.seq)
			}
		}
	}
	if b.aged.cancelled != 3 || b.pend.cancelled != 2 {
		t.Fatalf("cancelled per batch %d, %d; want 3, 2", b.aged.cancelled, b.pend.cancelled)
	}
	ops, dropped, gone := b.pendingFor(1, 0)
	if dropped || len(gone) != 0 || len(ops) != 5 {
		t.Fatalf("pendingFor: %+v %v %v", ops, dropped, gone)
	}
	for _, o := range ops {
		if o.data != nil {
			t.Fatalf("pendingFor: seq %d still has data", o.seq)
		}
	}
	// An append behind the first op still to be written waits for it.
	app(6, false)
	b.DeleteMessage(1, 6)
	want("behind the put's delete", 1, 2, 3, 4, 5)
	if b.stats.appends.Load() != 0 {
		t.Fatal("released callbacks counted as appends (their batch counts them)")
	}
}
