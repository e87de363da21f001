// Package store keeps Trident's durable state: metadata records (vhosts,
// exchanges, queues, bindings, users, permissions, retained messages,
// sessions) and the messages of durable queues. It implements the
// byte-oriented exchange.Store, which the core defines (the one definition
// of the interface); this package imports the core only in its tests.
// Badger is the durable engine (Badger v4); Memory is the in-memory fake.
// Both pass the conformance suite in store/storetest.
//
// # What Badger guarantees
//
//   - Metadata: PutMeta, DeleteMeta and DeleteMetaPrefix return after the
//     change is written and fsynced. LoadMeta scans a consistent snapshot
//     in key order. Metadata writes are not ordered against message writes
//     still queued for the writer.
//   - Messages are group-committed. AppendMessage copies data, queues the
//     record and returns; one writer goroutine takes everything queued,
//     writes it in one Badger WriteBatch (split by Badger when too big),
//     issues one fsync, and only then are the done callbacks called, in
//     issue order, from one notifier goroutine. A message whose done(nil)
//     was called survives kill -9 (TestCrashRecovery checks this).
//   - done is called exactly once per AppendMessage: with nil once durable,
//     with the store's write error if the group commit failed, or with
//     ErrClosed (synchronously, before AppendMessage returns) after Close.
//     Callbacks must not block for long: they hold up later callbacks, not
//     later writes.
//   - Records are applied in issue order: a delete issued after an append of
//     the same message applies after it, and DropMessages applies after
//     every append and delete issued before it and returns once durable.
//     A delete issued while its message's append is still queued cancels
//     both: neither is written, and the append's done gets nil as soon as
//     every op issued before it is durable or cancelled, without waiting
//     for a write (so a message consumed and acked at once is confirmed at
//     its ack). This relies on (qid, seq) naming one message: re-appending
//     a seq that is already stored, then deleting it while the re-append is
//     queued, would leave the older copy — PutMessage is for that. The
//     core never reuses a seq otherwise.
//   - DeleteMessage needs no callback; a delete is durable once a later
//     Sync returns or a later append's done is called. DeleteMessages
//     (a range [from, to) of one queue) is the same, one record: in its
//     batch the writer writes what came before it, deletes the range's
//     keys as Badger then holds them, and goes on with what came after;
//     reads see the range gone while it is queued. It removes a put's
//     message that is on disk from before, like a delete of a put. A range
//     of more than 4096 keys is deleted that many a batch behind a
//     tombstone written with the first chunk, so that it never holds the
//     writer; a later record inside the range finishes it first, and a
//     restart finishes a tombstoned range before the store is used
//     (rangedel.go): to every reader and across a crash it is still one
//     record in issue order.
//   - Sync returns once everything issued before it is durable and the done
//     callbacks of the appends before it have returned.
//   - LoadMessages scans a queue's messages in seq order. Records still
//     queued for the writer are not visible; call Sync first to see them.
//   - ReadMessages (a range read from a seq on) and MessageKeys (the same
//     without reading values) see every append and delete issued before
//     them, written or still queued: the queued state is taken first, then
//     Badger is read, and a record found in both is taken from the queue.
//     They are a disk-first queue's read path and its recovery count.
//   - Data handed to fn by LoadMeta and LoadMessages is a copy fn may keep.
//   - Close writes everything queued, waits for every callback, stops the
//     writer, the notifier and value-log GC, and closes the database. Every
//     call after Close returns (or passes to done) ErrClosed; DeleteMessage
//     does nothing.
//   - A failed group commit makes the store fail-stop: later appends, Syncs
//     and drops get that error. Restart and recover from disk.
//   - Memory is bounded: AppendMessage and DeleteMessage block while more
//     than BadgerOptions.MaxPendingBytes is queued for the writer.
//
// Badger runs with SyncWrites off; durability comes from the writer's
// db.Sync. Values of 256 bytes or more live in the value log, so the tree
// holds keys and pointers: a key scan reads no body. Space comes back by
// value-log GC every 30 s; an idle store that deleted many messages first
// flushes its memtables and flattens its tree (reclaim), holding every
// write meanwhile, so that GC sees the garbage. Past 256 MiB of resident
// file pages the value log's mappings are paged out of the process
// (residency_linux.go). Against power loss (not process death) this is as good as
// Badger's Sync, which fsyncs the active memtable's log and the value log:
// if a batch straddles a memtable switch, the part in the older memtable is
// on disk only once Badger has flushed that memtable to a table.
//
// # Encryption at rest
//
// With BadgerOptions.EncryptionKey every file Badger writes is encrypted
// (encryption.go). RotateEncryptionKey rewrites the whole store under a
// new key and a fresh key registry, swapping directories crash-safely
// (rewrite.go): afterwards the old key reads nothing. A key given for a
// store written without one is refused (ErrNotEncrypted) rather than
// leaving its plain text beside encrypted data; the same rewrite encrypts
// it. An open store holds the lock file dir+".lock" (ErrStoreInUse).
//
// # Keys
//
//	"m:" + key                             metadata record
//	'q' + qid (8 bytes BE) + seq (8 bytes BE) message (the core puts a
//	                                         priority lane and a page flag
//	                                         in seq: exchange/page.go)
//
// # Lock order (Badger)
//
// life (RWMutex: closed flag, guards the DB for synchronous calls) before
// mu (the pending batch, writer wake-up and back-pressure) before nothing;
// notifyMu (the queue of written batches) is never held with either.
package store
