package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// ErrKeyNotFound is returned by Get and GetUint64 for a key never set. Its
// text is "not found" without the package prefix because hashicorp/raft
// recognises a missing key by err.Error() == "not found".
var ErrKeyNotFound = errors.New("not found")

// Store is one Raft group's raft.LogStore and raft.StableStore.
type Store struct {
	d  *DB
	ks keyspace
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// FirstIndex returns the lowest stored index, 0 if the log is empty.
func (s *Store) FirstIndex() (uint64, error) { return s.edgeIndex(false) }

// LastIndex returns the highest stored index, 0 if the log is empty.
func (s *Store) LastIndex() (uint64, error) { return s.edgeIndex(true) }

func (s *Store) edgeIndex(last bool) (uint64, error) {
	if err := s.d.enter(); err != nil {
		return 0, err
	}
	defer s.d.leave()
	var idx uint64
	err := s.d.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = s.ks.log
		opts.Reverse = last
		it := txn.NewIterator(opts)
		defer it.Close()
		seek := s.ks.log
		if last {
			seek = s.ks.logKey(math.MaxUint64)
		}
		it.Seek(seek)
		if !it.Valid() {
			return nil
		}
		var ok bool
		if idx, ok = s.ks.logIndex(it.Item().Key()); !ok {
			return ErrCorrupt
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("raftstore: index: %w", err)
	}
	return idx, nil
}

// GetLog reads entry index into l; raft.ErrLogNotFound if it is not stored.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	if err := s.d.enter(); err != nil {
		return err
	}
	defer s.d.leave()
	err := s.d.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(s.ks.logKey(index))
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error { return decodeLog(v, index, l) })
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, badger.ErrKeyNotFound):
		return raft.ErrLogNotFound
	case errors.Is(err, ErrCorrupt):
		return fmt.Errorf("%w at index %d", err, index)
	default:
		return fmt.Errorf("raftstore: get log %d: %w", index, err)
	}
}

// StoreLog stores one entry, durably.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries in one write batch and returns once it is
// fsynced.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	if err := s.d.enter(); err != nil {
		return err
	}
	defer s.d.leave()
	// One buffer for every key and value of the batch; Badger keeps the
	// slices until the batch is committed, so they are cut only at the end.
	size := 0
	for _, l := range logs {
		size += len(s.ks.log) + 8 + 3 + 3*binary.MaxVarintLen64 + len(l.Data) + len(l.Extensions) + 2*binary.MaxVarintLen64
	}
	buf := make([]byte, 0, size)
	offs := make([]int, 0, 2*len(logs)+1)
	for _, l := range logs {
		offs = append(offs, len(buf))
		buf = append(buf, s.ks.log...)
		buf = binary.BigEndian.AppendUint64(buf, l.Index)
		offs = append(offs, len(buf))
		buf = encodeLog(buf, l)
	}
	offs = append(offs, len(buf))
	wb := s.d.db.NewWriteBatch()
	defer wb.Cancel()
	for i := range logs {
		k := buf[offs[2*i]:offs[2*i+1]:offs[2*i+1]]
		v := buf[offs[2*i+1]:offs[2*i+2]:offs[2*i+2]]
		if err := wb.Set(k, v); err != nil {
			return fmt.Errorf("raftstore: store logs: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("raftstore: store logs: %w", err)
	}
	s.d.lastWrite.Store(time.Now().UnixNano())
	return nil
}

// DeleteRange removes the stored entries with min ≤ index ≤ max, durably.
func (s *Store) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	if err := s.d.enter(); err != nil {
		return err
	}
	defer s.d.leave()
	var keys [][]byte
	err := s.d.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = s.ks.log
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(s.ks.logKey(min)); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			idx, ok := s.ks.logIndex(k)
			if !ok {
				return ErrCorrupt
			}
			if idx > max {
				break
			}
			keys = append(keys, k)
		}
		return nil
	})
	if err == nil {
		err = s.deleteKeys(keys)
	}
	if err == nil {
		s.d.deleted.Add(int64(len(keys)))
	}
	if err != nil {
		return fmt.Errorf("raftstore: delete range [%d, %d]: %w", min, max, err)
	}
	return nil
}

func (s *Store) deleteKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	wb := s.d.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	return wb.Flush()
}

// deletePrefix removes every key under prefix, durably.
func (s *Store) deletePrefix(prefix []byte) error {
	if err := s.d.enter(); err != nil {
		return err
	}
	defer s.d.leave()
	var keys [][]byte
	err := s.d.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefix
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err == nil {
		err = s.deleteKeys(keys)
	}
	if err != nil {
		return fmt.Errorf("raftstore: drop group: %w", err)
	}
	return nil
}

// Set stores val under key, durably.
func (s *Store) Set(key, val []byte) error {
	if err := s.d.enter(); err != nil {
		return err
	}
	defer s.d.leave()
	v := append([]byte(nil), val...)
	err := s.d.db.Update(func(txn *badger.Txn) error {
		return txn.Set(s.ks.stableKey(key), v)
	})
	if err != nil {
		return fmt.Errorf("raftstore: set %q: %w", key, err)
	}
	return nil
}

// Get returns the value stored under key, or ErrKeyNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	if err := s.d.enter(); err != nil {
		return nil, err
	}
	defer s.d.leave()
	var val []byte
	err := s.d.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(s.ks.stableKey(key))
		if err != nil {
			return err
		}
		val, err = item.ValueCopy(nil)
		if val == nil {
			val = []byte{}
		}
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftstore: get %q: %w", key, err)
	}
	return val, nil
}

// SetUint64 stores val under key, durably.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the number stored under key by SetUint64, or
// ErrKeyNotFound (with 0).
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftstore: value of %q is %d bytes, not a uint64", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
