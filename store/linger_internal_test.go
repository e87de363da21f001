package store

import "testing"

// TestCancelPairsAcrossBatches: deletes in the aged batch cancel appends of
// the batch being written and of their own batch; a put's delete stays; a
// drop or range delete ends the window.
func TestCancelPairsAcrossBatches(t *testing.T) {
	app := func(seq uint64, put bool) op { return op{kind: opAppend, qid: 1, seq: seq, put: put} }
	del := func(seq uint64) op { return op{kind: opDelete, qid: 1, seq: seq} }
	rng := op{kind: opRange, qid: 1, seq: 10, to: 20}
	check := func(name string, c, next *batch, wantC, wantN []bool, pairs uint64) {
		t.Helper()
		b := &Badger{}
		b.cancelPairs(c, next, map[msgID]int32{})
		for i, w := range wantC {
			if c.ops[i].skip != w {
				t.Errorf("%s: written batch op %d (kind %d seq %d): skip %v, want %v", name, i, c.ops[i].kind, c.ops[i].seq, c.ops[i].skip, w)
			}
		}
		for i, w := range wantN {
			if next.ops[i].skip != w {
				t.Errorf("%s: aged batch op %d (kind %d seq %d): skip %v, want %v", name, i, next.ops[i].kind, next.ops[i].seq, next.ops[i].skip, w)
			}
		}
		if n := b.stats.cancelled.Load(); n != pairs {
			t.Errorf("%s: cancelled %d pairs, want %d", name, n, pairs)
		}
	}
	aged := &batch{ops: []op{del(1), del(2), app(5, false), del(5), del(6)}}
	check("across", &batch{ops: []op{app(1, false), app(2, true), app(3, false)}}, aged,
		[]bool{true, true, false}, []bool{true, false, true, true, false}, 3)
	check("range in aged", &batch{ops: []op{app(1, false)}}, &batch{ops: []op{rng, del(1)}},
		[]bool{false}, []bool{false, false}, 0)
	check("range written", &batch{ops: []op{app(1, false), rng, app(4, false)}}, &batch{ops: []op{del(1), del(4)}},
		[]bool{false, false, true}, []bool{false, true}, 1)
	// The aged batch written at the next cycle: what is cancelled stays
	// cancelled and is not paired again.
	later := &batch{ops: []op{del(5)}}
	check("next cycle", aged, later, []bool{true, false, true, true, false}, []bool{false}, 0)
}

// TestReleaseAged: the done callbacks of the cancelled ops at the aged
// batch's head are released, in order, up to the first op still to be
// written; each once.
func TestReleaseAged(t *testing.T) {
	var called []int
	done := func(i int) func(error) { return func(error) { called = append(called, i) } }
	next := &batch{ops: []op{
		{kind: opAppend, seq: 1, skip: true, done: done(1)},
		{kind: opDelete, seq: 1, skip: true},
		{kind: opAppend, seq: 2, skip: true, done: done(2)},
		{kind: opDelete, seq: 9}, // still to be written: later dones wait for it
		{kind: opAppend, seq: 3, skip: true, done: done(3)},
	}}
	b := &Badger{}
	early := b.releaseAged(next)
	if early == nil || !early.early || len(early.ops) != 2 {
		t.Fatalf("released %+v, want the two head appends", early)
	}
	b.callbacks(early)
	if len(called) != 2 || called[0] != 1 || called[1] != 2 {
		t.Fatalf("called %v, want [1 2]", called)
	}
	if next.ops[0].done != nil || next.ops[2].done != nil || next.ops[4].done == nil {
		t.Fatal("released callbacks must leave the batch; the others stay")
	}
	if e := b.releaseAged(next); e != nil {
		t.Fatalf("released again: %+v", e)
	}
	if b.stats.appends.Load() != 0 {
		t.Fatal("released callbacks counted as appends (their batch counts them)")
	}
	b.callbacks(next)
	if len(called) != 3 || called[2] != 3 {
		t.Fatalf("called %v, want [1 2 3]", called)
	}
}
