package memstore

import (
	"sort"
	"strings"
	"sync"
)

// Store is an in-memory store. Appends are applied at once (so that a
// later delete of the same key is applied after them) but their done
// callbacks run on another goroutine, as a group-committing writer would.
// With Hold set, done callbacks wait until Release. Tests read and set
// the fields holding Mu (or before the store is in use).
type Store struct {
	Mu      sync.Mutex
	Meta    map[string][]byte
	Msgs    map[uint64]map[uint64][]byte
	Appends int
	Deletes int
	Hold    bool
	Held    []func()
	FailErr error // passed to done when set
	// SyncDone calls done before AppendMessage returns: a writer that
	// finished before the publisher looked.
	SyncDone bool
	WG       sync.WaitGroup
	Reads    int // messages returned by ReadMessages
	ReadOps  int // calls of ReadMessages
	KeyOps   int // calls of MessageKeys
}

// New returns an empty store.
func New() *Store {
	return &Store{Meta: map[string][]byte{}, Msgs: map[uint64]map[uint64][]byte{}}
}

func (s *Store) PutMeta(key string, val []byte) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.Meta[key] = append([]byte(nil), val...)
	return nil
}

func (s *Store) DeleteMeta(key string) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	delete(s.Meta, key)
	return nil
}

func (s *Store) DeleteMetaPrefix(prefix string) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	for k := range s.Meta {
		if strings.HasPrefix(k, prefix) {
			delete(s.Meta, k)
		}
	}
	return nil
}

func (s *Store) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	s.Mu.Lock()
	keys := s.metaKeysLocked(prefix)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = s.Meta[k]
	}
	s.Mu.Unlock()
	for i, k := range keys {
		if err := fn(k, vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) PutMessage(qid, seq uint64, data []byte, done func(error)) {
	s.AppendMessage(qid, seq, data, done)
}

func (s *Store) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	s.Mu.Lock()
	m := s.Msgs[qid]
	if m == nil {
		m = map[uint64][]byte{}
		s.Msgs[qid] = m
	}
	m[seq] = append([]byte(nil), data...)
	s.Appends++
	err := s.FailErr
	if done != nil {
		if s.SyncDone {
			s.Mu.Unlock()
			done(err)
			return
		}
		if s.Hold {
			s.Held = append(s.Held, func() { done(err) })
		} else {
			s.WG.Add(1)
			go func() { defer s.WG.Done(); done(err) }()
		}
	}
	s.Mu.Unlock()
}

func (s *Store) DeleteMessage(qid, seq uint64) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	delete(s.Msgs[qid], seq)
	s.Deletes++
}

func (s *Store) DeleteMessages(qid, from, to uint64) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	for seq := range s.Msgs[qid] {
		if seq >= from && seq < to {
			delete(s.Msgs[qid], seq)
			s.Deletes++
		}
	}
}

func (s *Store) LoadMessages(qid uint64, fn func(seq uint64, data []byte) error) error {
	s.Mu.Lock()
	seqs := s.seqsLocked(qid)
	data := make([][]byte, len(seqs))
	for i, q := range seqs {
		data[i] = s.Msgs[qid][q]
	}
	s.Mu.Unlock()
	for i, q := range seqs {
		if err := fn(q, data[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error {
	s.Mu.Lock()
	s.ReadOps++
	s.Mu.Unlock()
	seqs, data := s.snapshot(qid, from)
	for i, q := range seqs {
		s.Mu.Lock()
		s.Reads++
		s.Mu.Unlock()
		if !fn(q, data[i]) {
			return nil
		}
	}
	return nil
}

func (s *Store) MessageKeys(qid, from uint64, fn func(seq uint64, size int64) bool) error {
	s.Mu.Lock()
	s.KeyOps++
	s.Mu.Unlock()
	seqs, data := s.snapshot(qid, from)
	for i, q := range seqs {
		if !fn(q, int64(len(data[i]))) {
			return nil
		}
	}
	return nil
}

func (s *Store) snapshot(qid, from uint64) ([]uint64, [][]byte) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	var seqs []uint64
	var data [][]byte
	for _, q := range s.seqsLocked(qid) {
		if q >= from {
			seqs = append(seqs, q)
			data = append(data, s.Msgs[qid][q])
		}
	}
	return seqs, data
}

func (s *Store) DropMessages(qid uint64) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	delete(s.Msgs, qid)
	return nil
}

func (s *Store) Sync() error {
	s.WG.Wait()
	return nil
}

func (s *Store) Close() error { return s.Sync() }

// Release runs the held done callbacks, each on its own goroutine, and
// stops holding new ones.
func (s *Store) Release() {
	s.Mu.Lock()
	held := s.Held
	s.Held, s.Hold = nil, false
	s.Mu.Unlock()
	for _, f := range held {
		s.WG.Add(1)
		go func() { defer s.WG.Done(); f() }()
	}
}

// StoredSeqs returns the stored message seqs of queue qid in order.
func (s *Store) StoredSeqs(qid uint64) []uint64 {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.seqsLocked(qid)
}

// MetaKeys returns the meta keys with prefix, sorted.
func (s *Store) MetaKeys(prefix string) []string {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.metaKeysLocked(prefix)
}

// TotalMessages returns how many messages are stored, of all queues.
func (s *Store) TotalMessages() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	n := 0
	for _, m := range s.Msgs {
		n += len(m)
	}
	return n
}

func (s *Store) metaKeysLocked(prefix string) []string {
	var keys []string
	for k := range s.Meta {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func (s *Store) seqsLocked(qid uint64) []uint64 {
	seqs := make([]uint64, 0, len(s.Msgs[qid]))
	for q := range s.Msgs[qid] {
		seqs = append(seqs, q)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs
}
