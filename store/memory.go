package store

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Memory is an in-memory Store for tests of the packages above the store.
// It is goroutine-safe; AppendMessage calls done(nil) synchronously. Data is
// copied on the way in and on the way out. Callbacks (done, and the fn of the
// Load methods) run without the store's lock held, so they may call back in.
type Memory struct {
	mu     sync.Mutex
	closed bool
	meta   map[string][]byte
	msgs   map[uint64]map[uint64][]byte
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{
		meta: make(map[string][]byte),
		msgs: make(map[uint64]map[uint64][]byte),
	}
}

func clone(b []byte) []byte { return append([]byte{}, b...) }

// PutMeta implements Store.
func (m *Memory) PutMeta(key string, val []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.meta[key] = clone(val)
	return nil
}

// WriteMetaBatch writes several metadata records at once: keys[i] gets
// vals[i], or is deleted when vals[i] is nil.
func (m *Memory) WriteMetaBatch(keys []string, vals [][]byte) error {
	if len(keys) != len(vals) {
		return fmt.Errorf("store: meta batch of %d keys and %d values", len(keys), len(vals))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for i, k := range keys {
		if vals[i] == nil {
			delete(m.meta, k)
		} else {
			m.meta[k] = clone(vals[i])
		}
	}
	return nil
}

// DeleteMeta implements Store.
func (m *Memory) DeleteMeta(key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	delete(m.meta, key)
	return nil
}

// DeleteMetaPrefix implements Store.
func (m *Memory) DeleteMetaPrefix(prefix string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for k := range m.meta {
		if strings.HasPrefix(k, prefix) {
			delete(m.meta, k)
		}
	}
	return nil
}

// GetMeta reads the record of key: a copy, and whether there is one.
func (m *Memory) GetMeta(key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, false, ErrClosed
	}
	v, ok := m.meta[key]
	if !ok {
		return nil, false, nil
	}
	return clone(v), true, nil
}

// LoadMeta implements Store. It iterates a snapshot taken when it is called.
func (m *Memory) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	type kv struct {
		k string
		v []byte
	}
	var recs []kv
	for k, v := range m.meta {
		if strings.HasPrefix(k, prefix) {
			recs = append(recs, kv{k, clone(v)})
		}
	}
	m.mu.Unlock()
	sort.Slice(recs, func(i, j int) bool { return recs[i].k < recs[j].k })
	for _, r := range recs {
		if err := fn(r.k, r.v); err != nil {
			return err
		}
	}
	return nil
}

// AppendMessage implements Store; done is called before it returns.
func (m *Memory) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	m.mu.Lock()
	err := ErrClosed
	if !m.closed {
		err = nil
		q := m.msgs[qid]
		if q == nil {
			q = make(map[uint64][]byte)
			m.msgs[qid] = q
		}
		q[seq] = clone(data)
	}
	m.mu.Unlock()
	if done != nil {
		done(err)
	}
}

// PutMessage implements Store: AppendMessage (nothing is batched here).
func (m *Memory) PutMessage(qid, seq uint64, data []byte, done func(error)) {
	m.AppendMessage(qid, seq, data, done)
}

// DeleteMessage implements Store.
func (m *Memory) DeleteMessage(qid, seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.msgs[qid]; q != nil && !m.closed {
		delete(q, seq)
		if len(q) == 0 {
			delete(m.msgs, qid)
		}
	}
}

// DeleteMessages implements Store.
func (m *Memory) DeleteMessages(qid, from, to uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.msgs[qid]
	if q == nil || m.closed || to <= from {
		return
	}
	if to-from < uint64(len(q)) {
		for seq := from; seq < to; seq++ {
			delete(q, seq)
		}
	} else {
		for seq := range q {
			if seq >= from && seq < to {
				delete(q, seq)
			}
		}
	}
	if len(q) == 0 {
		delete(m.msgs, qid)
	}
}

// LoadMessages implements Store. It iterates a snapshot taken when it is called.
func (m *Memory) LoadMessages(qid uint64, fn func(seq uint64, data []byte) error) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	q := m.msgs[qid]
	seqs := make([]uint64, 0, len(q))
	vals := make(map[uint64][]byte, len(q))
	for s, v := range q {
		seqs = append(seqs, s)
		vals[s] = clone(v)
	}
	m.mu.Unlock()
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, s := range seqs {
		if err := fn(s, vals[s]); err != nil {
			return err
		}
	}
	return nil
}

// ReadMessages implements Store over a snapshot taken when it is called.
func (m *Memory) ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error {
	seqs, vals, err := m.snapshot(qid, from)
	if err != nil {
		return err
	}
	for i, s := range seqs {
		if !fn(s, vals[i]) {
			return nil
		}
	}
	return nil
}

// MessageKeys implements Store; size is the record's exact size.
func (m *Memory) MessageKeys(qid, from uint64, fn func(seq uint64, size int64) bool) error {
	seqs, vals, err := m.snapshot(qid, from)
	if err != nil {
		return err
	}
	for i, s := range seqs {
		if !fn(s, int64(len(vals[i]))) {
			return nil
		}
	}
	return nil
}

func (m *Memory) snapshot(qid, from uint64) ([]uint64, [][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, nil, ErrClosed
	}
	q := m.msgs[qid]
	seqs := make([]uint64, 0, len(q))
	for s := range q {
		if s >= from {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	vals := make([][]byte, len(seqs))
	for i, s := range seqs {
		vals[i] = clone(q[s])
	}
	return seqs, vals, nil
}

// MaxQueueID returns the largest queue id below `below` with messages.
func (m *Memory) MaxQueueID(below uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var id uint64
	for q, ms := range m.msgs {
		if q < below && q > id && len(ms) > 0 {
			id = q
		}
	}
	return id, nil
}

// DropMessages implements Store.
func (m *Memory) DropMessages(qid uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	delete(m.msgs, qid)
	return nil
}

// Sync implements Store; everything is "durable" at once.
func (m *Memory) Sync() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

// Close implements Store. The contents are discarded.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.closed = true
	m.meta, m.msgs = nil, nil
	return nil
}
