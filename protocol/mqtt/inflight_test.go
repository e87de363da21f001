package mqtt

import "testing"

func TestPidTable(t *testing.T) {
	var tb pidTable
	seen := map[uint16]bool{}
	for i := 0; i < 100; i++ {
		pid, ok := tb.alloc(inflight{seq: uint64(i)})
		if !ok || pid == 0 || seen[pid] {
			t.Fatalf("alloc %d: pid %d ok %v (duplicate %v)", i, pid, ok, seen[pid])
		}
		seen[pid] = true
	}
	if tb.len() != 100 {
		t.Fatalf("len %d", tb.len())
	}
	if f, ok := tb.get(1); !ok || f.seq != 0 {
		t.Fatalf("get(1) = %+v %v", f, ok)
	}
	tb.del(1)
	tb.del(1) // twice is harmless
	if _, ok := tb.get(1); ok || tb.len() != 99 {
		t.Fatalf("after del: len %d", tb.len())
	}
	// A packet id restored from a session, beyond the table.
	tb.set(60000, inflight{released: true})
	if f, ok := tb.get(60000); !ok || !f.released || tb.len() != 100 {
		t.Fatalf("restored id: %+v %v len %d", f, ok, tb.len())
	}
	n := 0
	tb.each(func(pid uint16, f inflight) { n++ })
	if n != 100 {
		t.Fatalf("each visited %d", n)
	}
	// Fill every id: the 65536th allocation fails, a freed id comes back.
	for tb.len() < 65535 {
		if _, ok := tb.alloc(inflight{}); !ok {
			t.Fatalf("alloc failed at len %d", tb.len())
		}
	}
	if _, ok := tb.alloc(inflight{}); ok {
		t.Fatal("alloc beyond 65535 ids")
	}
	tb.del(777)
	if pid, ok := tb.alloc(inflight{}); !ok || pid != 777 {
		t.Fatalf("alloc after free: %d %v", pid, ok)
	}
	if _, ok := tb.get(0); ok {
		t.Fatal("packet id 0 is never in flight")
	}
}
