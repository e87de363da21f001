package main

import (
	"encoding/binary"
	"sync"
	"time"
)

// indexTally counts the messages a phase receives by their index (the
// first 8 bytes of the body, as the publishers of the bridge and super
// stream phases write it): each index once, the rest duplicates. all is
// closed once every index of 0…n-1 arrived. It is safe for concurrent
// handlers.
type indexTally struct {
	mu       sync.Mutex
	seen     []bool
	distinct int
	dups     int
	last     time.Time // the last new index's arrival
	all      chan struct{}
}

func newIndexTally(n int) *indexTally {
	return &indexTally{seen: make([]bool, n), all: make(chan struct{})}
}

// add counts a body; one shorter than 8 bytes or out of range is ignored.
func (t *indexTally) add(body []byte) {
	if len(body) < 8 {
		return
	}
	i := binary.BigEndian.Uint64(body)
	t.mu.Lock()
	defer t.mu.Unlock()
	if i >= uint64(len(t.seen)) {
		return
	}
	if t.seen[i] {
		t.dups++
		return
	}
	t.seen[i] = true
	t.last = time.Now()
	if t.distinct++; t.distinct == len(t.seen) {
		close(t.all)
	}
}

// counts are the distinct indexes seen, the duplicates and when the last
// new one came.
func (t *indexTally) counts() (distinct, dups int, last time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.distinct, t.dups, t.last
}
