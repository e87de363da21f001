package streamlog

import (
	"sort"
	"strings"
	"sync"
)

// fakeStore is an in-memory Store (a copy of the core's test fake,
// exchange/fakestore_test.go, without its core types). Appends are applied at once (so that a
// later delete of the same key is applied after them) but their done
// callbacks run on another goroutine, as a group-committing writer would.
// With hold set, done callbacks wait until release.
type fakeStore struct {
	mu      sync.Mutex
	meta    map[string][]byte
	msgs    map[uint64]map[uint64][]byte
	appends int
	deletes int
	hold    bool
	held    []func()
	failErr error // passed to done when set
	// syncDone calls done before AppendMessage returns: a writer that
	// finished before the publisher looked.
	syncDone bool
	wg       sync.WaitGroup
	reads    int // messages returned by ReadMessages
	readOps  int // calls of ReadMessages
	keyOps   int // calls of MessageKeys
}

var _ Store = (*fakeStore)(nil)
var _ MessageLog = (*fakeStore)(nil)

func newFakeStore() *fakeStore {
	return &fakeStore{meta: map[string][]byte{}, msgs: map[uint64]map[uint64][]byte{}}
}

func (s *fakeStore) PutMeta(key string, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meta[key] = append([]byte(nil), val...)
	return nil
}

func (s *fakeStore) DeleteMeta(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.meta, key)
	return nil
}

func (s *fakeStore) DeleteMetaPrefix(prefix string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.meta {
		if strings.HasPrefix(k, prefix) {
			delete(s.meta, k)
		}
	}
	return nil
}

func (s *fakeStore) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	s.mu.Lock()
	keys := s.metaKeysLocked(prefix)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = s.meta[k]
	}
	s.mu.Unlock()
	for i, k := range keys {
		if err := fn(k, vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *fakeStore) PutMessage(qid, seq uint64, data []byte, done func(error)) {
	s.AppendMessage(qid, seq, data, done)
}

func (s *fakeStore) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	s.mu.Lock()
	m := s.msgs[qid]
	if m == nil {
		m = map[uint64][]byte{}
		s.msgs[qid] = m
	}
	m[seq] = append([]byte(nil), data...)
	s.appends++
	err := s.failErr
	if done != nil {
		if s.syncDone {
			s.mu.Unlock()
			done(err)
			return
		}
		if s.hold {
			s.held = append(s.held, func() { done(err) })
		} else {
			s.wg.Add(1)
			go func() { defer s.wg.Done(); done(err) }()
		}
	}
	s.mu.Unlock()
}

func (s *fakeStore) DeleteMessage(qid, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.msgs[qid], seq)
	s.deletes++
}

func (s *fakeStore) DeleteMessages(qid, from, to uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for seq := range s.msgs[qid] {
		if seq >= from && seq < to {
			delete(s.msgs[qid], seq)
			s.deletes++
		}
	}
}

func (s *fakeStore) LoadMessages(qid uint64, fn func(seq uint64, data []byte) error) error {
	s.mu.Lock()
	seqs := s.seqsLocked(qid)
	data := make([][]byte, len(seqs))
	for i, q := range seqs {
		data[i] = s.msgs[qid][q]
	}
	s.mu.Unlock()
	for i, q := range seqs {
		if err := fn(q, data[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *fakeStore) ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error {
	s.mu.Lock()
	s.readOps++
	s.mu.Unlock()
	seqs, data := s.snapshot(qid, from)
	for i, q := range seqs {
		s.mu.Lock()
		s.reads++
		s.mu.Unlock()
		if !fn(q, data[i]) {
			return nil
		}
	}
	return nil
}

func (s *fakeStore) MessageKeys(qid, from uint64, fn func(seq uint64, size int64) bool) error {
	s.mu.Lock()
	s.keyOps++
	s.mu.Unlock()
	seqs, data := s.snapshot(qid, from)
	for i, q := range seqs {
		if !fn(q, int64(len(data[i]))) {
			return nil
		}
	}
	return nil
}

func (s *fakeStore) snapshot(qid, from uint64) ([]uint64, [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var seqs []uint64
	var data [][]byte
	for _, q := range s.seqsLocked(qid) {
		if q >= from {
			seqs = append(seqs, q)
			data = append(data, s.msgs[qid][q])
		}
	}
	return seqs, data
}

func (s *fakeStore) DropMessages(qid uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.msgs, qid)
	return nil
}

func (s *fakeStore) Sync() error {
	s.wg.Wait()
	return nil
}

func (s *fakeStore) Close() error { return s.Sync() }

// release runs the held done callbacks, each on its own goroutine, and
// stops holding new ones.
func (s *fakeStore) release() {
	s.mu.Lock()
	held := s.held
	s.held, s.hold = nil, false
	s.mu.Unlock()
	for _, f := range held {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); f() }()
	}
}

// storedSeqs returns the stored message seqs of queue qid in order.
func (s *fakeStore) storedSeqs(qid uint64) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seqsLocked(qid)
}

// metaKeys returns the meta keys with prefix, sorted.
func (s *fakeStore) metaKeys(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metaKeysLocked(prefix)
}

func (s *fakeStore) totalMessages() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.msgs {
		n += len(m)
	}
	return n
}

func (s *fakeStore) metaKeysLocked(prefix string) []string {
	var keys []string
	for k := range s.meta {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func (s *fakeStore) seqsLocked(qid uint64) []uint64 {
	seqs := make([]uint64, 0, len(s.msgs[qid]))
	for q := range s.msgs[qid] {
		seqs = append(seqs, q)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs
}
