package meta

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// ProposeTimeout bounds a replicated write made through Store.
const ProposeTimeout = 10 * time.Second

// ErrDetached is returned by a Store's replicated writes after Detach
// (the node is shutting down its metadata group).
var ErrDetached = errors.New("meta: store detached from the metadata group")

// Store is an exchange.Store whose replicated metadata writes go through
// the metadata group once attached. The core's topology does not use it
// in a cluster (its commands are proposed: Group.ProposeTopology); the
// records that still do are the user database's and the parameters'
// while topology commands are off, MQTT's retained messages and
// sessions, stream offsets, forget/rebalance's queue members and the
// feature flags' records. Writes of replicated keys are
// proposed and return once committed (at most ProposeTimeout; an error
// without quorum); the FSM then writes them to the local store on every
// node, this one included. Before Attach they go to the local store (the
// defaults a node creates at start-up); after Detach they fail with
// ErrDetached. DeleteMetaPrefix is replicated when the prefix itself is
// a replicated key. Everything else goes straight to the local store.
type Store struct {
	local      exchange.Store
	replicated func(key string) bool

	mu       sync.RWMutex
	g        proposer // nil until Attach
	detached bool
}

// proposer is what Store needs of a Group.
type proposer interface {
	Propose(ctx context.Context, ops []exchange.MetaOp) error
}

var _ exchange.Store = (*Store)(nil)

// Wrap returns a Store over local; replicated tells the replicated keys.
func Wrap(local exchange.Store, replicated func(key string) bool) *Store {
	return &Store{local: local, replicated: replicated}
}

// Attach starts replicating through g.
func (s *Store) Attach(g *Group) { s.attach(g) }

func (s *Store) attach(g proposer) {
	s.mu.Lock()
	s.g, s.detached = g, false
	s.mu.Unlock()
}

// Detach stops replicating: replicated writes fail from now on.
func (s *Store) Detach() {
	s.mu.Lock()
	s.g, s.detached = nil, true
	s.mu.Unlock()
}

// Local returns the wrapped store.
func (s *Store) Local() exchange.Store { return s.local }

// write proposes op if its key is replicated and a group is attached;
// local reports that the caller must write locally instead.
func (s *Store) write(op exchange.MetaOp) (local bool, err error) {
	if !s.replicated(op.Key) {
		return true, nil
	}
	s.mu.RLock()
	g, detached := s.g, s.detached
	s.mu.RUnlock()
	switch {
	case detached:
		return false, ErrDetached
	case g == nil:
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ProposeTimeout)
	defer cancel()
	return false, g.Propose(ctx, []exchange.MetaOp{op})
}

// PutMeta implements exchange.Store.
func (s *Store) PutMeta(key string, val []byte) error {
	if val == nil {
		val = []byte{} // a nil Val would be a delete
	}
	if local, err := s.write(exchange.MetaOp{Key: key, Val: val}); !local {
		return err
	}
	return s.local.PutMeta(key, val)
}

// DeleteMeta implements exchange.Store.
func (s *Store) DeleteMeta(key string) error {
	if local, err := s.write(exchange.MetaOp{Key: key}); !local {
		return err
	}
	return s.local.DeleteMeta(key)
}

// DeleteMetaPrefix implements exchange.Store.
func (s *Store) DeleteMetaPrefix(prefix string) error {
	if local, err := s.write(exchange.MetaOp{Key: prefix, Prefix: true}); !local {
		return err
	}
	return s.local.DeleteMetaPrefix(prefix)
}

// GetMeta reads one record of the local store (the MQTT front end's
// retained bodies).
func (s *Store) GetMeta(key string) (val []byte, found bool, err error) {
	if g, ok := s.local.(interface {
		GetMeta(key string) ([]byte, bool, error)
	}); ok {
		return g.GetMeta(key)
	}
	err = s.local.LoadMeta(key, func(k string, v []byte) error {
		if k == key {
			val, found = v, true
		}
		return nil
	})
	return val, found, err
}

// LoadMeta implements exchange.Store (local).
func (s *Store) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	return s.local.LoadMeta(prefix, fn)
}

// AppendMessage implements exchange.Store (local).
func (s *Store) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	s.local.AppendMessage(qid, seq, data, done)
}

// PutMessage implements quorum.Store (local).
func (s *Store) PutMessage(qid, seq uint64, data []byte, done func(error)) {
	s.local.PutMessage(qid, seq, data, done)
}

// DeleteMessage implements exchange.Store (local).
func (s *Store) DeleteMessage(qid, seq uint64) { s.local.DeleteMessage(qid, seq) }

// DeleteMessages implements exchange.Store (local).
func (s *Store) DeleteMessages(qid, from, to uint64) { s.local.DeleteMessages(qid, from, to) }

// LoadMessages implements exchange.Store (local).
func (s *Store) LoadMessages(qid uint64, fn func(seq uint64, data []byte) error) error {
	return s.local.LoadMessages(qid, fn)
}

// ReadMessages implements exchange.Store (local).
func (s *Store) ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error {
	return s.local.ReadMessages(qid, from, fn)
}

// MessageKeys implements exchange.Store (local).
func (s *Store) MessageKeys(qid, from uint64, fn func(seq uint64, size int64) bool) error {
	return s.local.MessageKeys(qid, from, fn)
}

// DropMessages implements exchange.Store (local).
func (s *Store) DropMessages(qid uint64) error { return s.local.DropMessages(qid) }

// Sync implements exchange.Store (local).
func (s *Store) Sync() error { return s.local.Sync() }

// Close closes the local store.
func (s *Store) Close() error { return s.local.Close() }
