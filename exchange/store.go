package exchange

import "github.com/trident-broker/trident/exchange/streamlog"

// Store is what the core needs from durable storage, and the one definition
// of it: the core owns the interface it relies on, and the store package,
// which implements it (store.Badger, store.Memory) and whose conformance
// suite (store/storetest) checks every implementation against it, never
// imports the core outside its tests. It is byte-oriented so that the store
// needs no core types. The methods a stream's log uses as well are declared
// once, in streamlog.Store, which it embeds.
//
// Metadata writes are synchronous and durable when they return. Message
// appends are asynchronous and group-committed: done is called (from the
// store's writer goroutine) once the record is durable, or with an error.
// Deletes are batched too and need no callback; a delete issued after an
// append of the same key is applied after it.
type Store interface {
	// PutMeta, DeleteMeta, DeleteMetaPrefix, LoadMeta, AppendMessage,
	// ReadMessages, MessageKeys, DropMessages: declared and documented
	// there (exchange imports streamlog, not the reverse).
	streamlog.Store

	// PutMessage is AppendMessage for a message that may be stored already
	// (a quorum queue's FSM applying entries again after a crash): a later
	// delete of it must reach the disk, even in the same write batch.
	PutMessage(qid, seq uint64, data []byte, done func(error))
	// DeleteMessage removes message seq of queue qid (batched, not waited for).
	DeleteMessage(qid, seq uint64)
	// DeleteMessages removes every message of queue qid whose seq is in
	// [from, to), in one op (batched, not waited for): ordered after every
	// append and delete issued before it and before every later one.
	DeleteMessages(qid, from, to uint64)
	// LoadMessages calls fn for each stored message of qid in seq order.
	LoadMessages(qid uint64, fn func(seq uint64, data []byte) error) error
	// Sync waits until every append and delete issued so far is durable.
	Sync() error
	// Close flushes and closes the store.
	Close() error
}
