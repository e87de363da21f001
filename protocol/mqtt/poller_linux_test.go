package mqtt

import "testing"

// TestPollerIDs: the poller's ids are never 0, an ended connection's slot
// is reused by the next, and an event for the ended one's id (queued
// before it ended) finds nothing rather than the slot's new connection.
func TestPollerIDs(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	a, b := &conn{}, &conn{}
	ida, idb := p.add(a), p.add(b)
	if ida == 0 || idb == 0 || ida == idb {
		t.Fatalf("ids %d, %d", ida, idb)
	}
	if p.lookup(ida) != a || p.lookup(idb) != b {
		t.Fatal("lookup")
	}
	p.forget(ida)
	p.forget(ida) // twice: no second free slot
	if p.lookup(ida) != nil {
		t.Fatal("a forgotten id finds a connection")
	}
	c, d := &conn{}, &conn{}
	idc, idd := p.add(c), p.add(d)
	if len(p.slots) != 3 {
		t.Fatalf("%d slots for 4 connections of which 3 live: the forgotten one's slot is not reused", len(p.slots))
	}
	if idc == ida || p.lookup(ida) != nil || p.lookup(idc) != c || p.lookup(idd) != d || p.lookup(idb) != b {
		t.Fatal("after reuse: a stale id finds the slot's new connection, or a live one is lost")
	}
	if p.lookup(0) != nil || p.lookup(1<<40|99) != nil {
		t.Fatal("an unknown id finds a connection")
	}
}
