package store

import "errors"

// ErrClosed is returned (or passed to a done callback) by every operation
// issued after Close.
var ErrClosed = errors.New("store: closed")

// Store is the byte-oriented durable store. It has exactly the method set of
// exchange.Store, so *Memory and *Badger satisfy both without this package
// importing the core.
type Store interface {
	// PutMeta stores a metadata record under key, durably.
	PutMeta(key string, val []byte) error
	// DeleteMeta removes a metadata record, durably.
	DeleteMeta(key string) error
	// DeleteMetaPrefix removes every metadata record whose key starts with prefix.
	DeleteMetaPrefix(prefix string) error
	// LoadMeta calls fn for each record whose key starts with prefix, in key order.
	LoadMeta(prefix string, fn func(key string, val []byte) error) error

	// AppendMessage stores message seq of queue qid. done may be nil.
	AppendMessage(qid, seq uint64, data []byte, done func(error))
	// PutMessage is AppendMessage for a message that may be stored
	// already (written again): a delete of it issued later must reach the
	// disk even if the two meet in one batch.
	PutMessage(qid, seq uint64, data []byte, done func(error))
	// DeleteMessage removes message seq of queue qid (batched, not waited for).
	DeleteMessage(qid, seq uint64)
	// DeleteMessages removes every message of queue qid whose seq is in
	// [from, to) (batched, not waited for, like DeleteMessage): after every
	// append and delete issued before it, before every one issued after.
	DeleteMessages(qid, from, to uint64)
	// LoadMessages calls fn for each stored message of qid in seq order.
	LoadMessages(qid uint64, fn func(seq uint64, data []byte) error) error
	// ReadMessages calls fn for each stored message of qid whose seq is at
	// least from, in seq order, until fn returns false. It sees every
	// append and delete issued before it, written or still queued.
	ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error
	// MessageKeys calls fn for each stored message of qid whose seq is at
	// least from, in seq order, with an estimate of its size, without
	// reading the message, until fn returns false.
	MessageKeys(qid, from uint64, fn func(seq uint64, size int64) bool) error
	// DropMessages removes every message of qid.
	DropMessages(qid uint64) error
	// Sync waits until every append and delete issued so far is durable.
	Sync() error
	// Close flushes and closes the store.
	Close() error
}

// Stats counts the work of a group-committing store since it was opened.
type Stats struct {
	Appends   uint64 // appends whose done callback was called with nil
	Deletes   uint64 // message deletes issued
	Cancelled uint64 // appends deleted before they were written: neither reached the disk
	Batches   uint64 // group commits (batches taken by the writer)
	Syncs     uint64 // fsyncs issued by the writer
}

var (
	_ Store = (*Memory)(nil)
	_ Store = (*Badger)(nil)
)
