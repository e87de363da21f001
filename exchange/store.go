package exchange

// Store is what the core needs from durable storage, and the one definition
// of it: the core owns the interface it relies on, and the store package,
// which implements it (store.Badger, store.Memory) and whose conformance
// suite (store/storetest) checks every implementation against it, never
// imports the core outside its tests. It is byte-oriented so that the store
// needs no core types.
//
// Metadata writes are synchronous and durable when they return. Message
// appends are asynchronous and group-committed: done is called (from the
// store's writer goroutine) once the record is durable, or with an error.
// Deletes are batched too and need no callback; a delete issued after an
// append of the same key is applied after it.
type Store interface {
	// PutMeta stores a metadata record (vhost, exchange, queue, binding,
	// user, permission...) under key, durably.
	PutMeta(key string, val []byte) error
	// DeleteMeta removes a metadata record, durably.
	DeleteMeta(key string) error
	// DeleteMetaPrefix removes every metadata record whose key starts with prefix.
	DeleteMetaPrefix(prefix string) error
	// LoadMeta calls fn for each record whose key starts with prefix, in key order.
	LoadMeta(prefix string, fn func(key string, val []byte) error) error

	// AppendMessage stores message seq of queue qid. done may be nil. The
	// store copies data: the caller may reuse it once AppendMessage returns.
	AppendMessage(qid, seq uint64, data []byte, done func(error))
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
	// ReadMessages calls fn for each stored message of qid whose seq is at
	// least from, in seq order, until fn returns false: the read path of a
	// queue whose backlog is on disk. fn may keep data. It sees every
	// append and delete issued before it, written or still queued.
	ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error
	// MessageKeys is ReadMessages without reading the messages: fn gets
	// each seq and an estimate of its record's size (exact within a few
	// bytes). Recovery counts a backlog with it.
	MessageKeys(qid, from uint64, fn func(seq uint64, size int64) bool) error
	// DropMessages removes every message of qid.
	DropMessages(qid uint64) error
	// Sync waits until every append and delete issued so far is durable.
	Sync() error
	// Close flushes and closes the store.
	Close() error
}

// MetaCreator is implemented by a Store whose metadata is shared with
// other nodes (a cluster's): CreateMeta stores a record only if key holds
// none (or holds val already), deciding in the one order every node
// applies records in, so that of two nodes creating one key at once the
// first committed wins everywhere and the other's write changes nothing.
// It returns once the decision is applied on this node, created telling
// whether val is the record key holds now. A Store without it is this node's
// alone, where the topology lock already decides (PutMeta).
type MetaCreator interface {
	CreateMeta(key string, val []byte) (created bool, err error)
}
