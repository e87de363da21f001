package exchange

import (
	"runtime"
	"strconv"
	"testing"
)

// TestFleetGoneGivesBack: 20,000 queues, each bound to amq.topic under its
// own key (an MQTT device's command topic) and to amq.direct, come and go.
// What the vhost's queue map, the exchanges' binding indexes and lists and
// the topic trie's node with a child per device took is given back: the
// live heap after they left is within 512 KiB of before (it stays
// above when the maps and lists keep what they grew to: 5.8 MiB for these).
func TestFleetGoneGivesBack(t *testing.T) {
	v, _ := newTestVHost(t)
	const n = 20000
	name := func(i int) string { return "fleet-dev-" + strconv.Itoa(i) }
	before := liveHeap()
	for i := range n {
		declareQ(t, v, name(i), QueueOpts{})
		bindQ(t, v, name(i), "amq.topic", "fleet.cmd."+strconv.Itoa(i), nil)
		bindQ(t, v, name(i), "amq.direct", name(i), nil)
	}
	during := liveHeap()
	for i := range n {
		if _, err := v.DeleteQueue(name(i), false, false, nil); err != nil {
			t.Fatalf("DeleteQueue: %v", err)
		}
	}
	after := liveHeap()
	if len(v.Queues()) != 0 {
		t.Fatalf("%d queues left", len(v.Queues()))
	}
	t.Logf("live heap %d KiB before, %d KiB with %d queues, %d KiB after they left", before>>10, during>>10, n, after>>10)
	if after > before+512<<10 {
		t.Fatalf("live heap grew by %d KiB after %d queues and their bindings left", (after-before)>>10, n)
	}
}

func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestShrinkMapAmortized: a map is copied only after it lost three
// quarters of its peak, so deletes and inserts around one size never copy
// it again and again, and a small map is never copied.
func TestShrinkMapAmortized(t *testing.T) {
	m, peak, copies := map[int]bool{}, 0, 0
	del := func(k int) {
		delete(m, k)
		before := m
		if m = shrinkMap(m, &peak); !sameMap(m, before) {
			copies++
		}
	}
	for i := range 20000 {
		m[i] = true
	}
	for i := range 15001 { // down to 4,999: under a quarter of 20,000
		del(i)
	}
	if copies != 1 || len(m) != 4999 {
		t.Fatalf("%d copies down to %d entries, want 1 (at a quarter of the peak)", copies, len(m))
	}
	for round := range 1000 { // inserts and deletes around 4,999
		m[100000+round] = true
		del(100000 + round)
	}
	if copies != 1 {
		t.Fatalf("%d copies while oscillating, want none more", copies-1)
	}
	small, sp := map[int]bool{1: true, 2: true}, 0
	delete(small, 1)
	if !sameMap(shrinkMap(small, &sp), small) {
		t.Fatal("a small map was copied")
	}
	if s := shrinkSlice(make([]int, 10, 5000)); cap(s) != 20 {
		t.Fatalf("a slice of 10 in 5,000 kept capacity %d, want 20", cap(s))
	}
	if s := shrinkSlice(make([]int, 10, 100)); cap(s) != 100 {
		t.Fatalf("a small slice was copied (capacity %d)", cap(s))
	}
}

// sameMap reports whether a and b are one map (a write through one shows
// in the other).
func sameMap(a, b map[int]bool) bool {
	const probe = -1 << 40
	a[probe] = true
	_, ok := b[probe]
	delete(a, probe)
	return ok
}
