// Package streamlog is a stream's log: an append-only, segmented log of
// messages in the node's store, read from an offset or a time, never
// consumed away, with retention by whole segments. It knows records, not
// messages: what it appends is the core's encoded message record
// (exchange/codec.go), of which it reads only the version byte (a chunk
// record, or a named producer's header: DecodeWriter) and, through
// Config.TimeOf, the enqueue time. It does not import the core; the core
// (exchange's stream.go) makes a queue of it: consumers and their cursors,
// named offsets, single active consumer, the cluster seam.
//
// What it holds, by file: log.go the segments and the append path;
// chunk.go chunk records (one store record per run of publishes); read.go
// the read path and its shared cache; retain.go retention, deletion and
// recovery; segrecord.go the segment records; writers.go the named
// producers' table (deduplication) and the confirms of duplicates;
// replicated.go a clustered stream's log (a leader appending through its
// Raft group, a follower watching its store).
//
// Why Badger and not segment files: the node's message store already gives
// what a log needs and what is hard to get right twice: group commit (one
// write batch and one fsync for the appends of many publishers, with a
// done callback per record once it is durable), ordered range reads that
// bound memory (an iterator with a small prefetch), and crash recovery
// (Badger's own WAL: after kill -9 every record whose done callback ran is
// there, in order). A segment is one key range of the store: it has its
// own store id, its records are keyed by offset under it (a segment of
// version 2 holds chunk records, each the messages of one publish run
// keyed by the first one's offset: chunk.go; one of version 1 a
// record per message), so retention deletes a whole segment with one
// DropMessages and never touches a single record. Disk, memory and the
// fsync budget are shared with the queues of the node rather than
// competing with them.
//
// Segment records ("streamseg/<vhost>\x00<queue>\x00<first offset, 20
// digits>") name each segment's store id and first offset; one is written
// (durably, PutMeta) before the first message of its segment is appended,
// so every confirmed message is in a segment the next start finds. A start
// scans the keys of each segment (not the values) for its count, bytes and
// last offset (in a segment of chunks, a record counts the offsets up to
// the next key, the last one what it holds), and reads its first and last
// message for their timestamps.
//
// Offsets are dense from 0 (RabbitMQ's too), except that a crash may leave
// a gap where appends that were never confirmed were lost: a reader skips
// it. Readers see only durable messages (up to the durable watermark): a
// consumer never gets a message that a crash could take back.
//
// # Guarantees
//
//   - An append's done callback runs once its record is durable (in the
//     store, or committed by the group for a clustered stream), in the
//     order appends were made, or with the error that lost it; a record a
//     done callback reported is found by the next Recover.
//   - Readers (Read, SeekTime, Bounds) see only offsets below the durable
//     watermark (Durable), which only rises.
//   - Retention removes whole segments, never the one appended to; a
//     removed segment's record goes before its messages.
//   - A named producer's publishing id not above the highest one appended
//     is a duplicate (DuplicateLocked): not appended again, confirmed
//     once everything appended before it is durable (AfterTailLocked,
//     FireWaiters).
//
// # Locks
//
// Log.fmu, Log.loadMu → Log.mu → {Log.wmu, Log.dmu, the read cache's
// lock}; wmu, dmu and the cache's lock are never held together. The
// owner's lock (exchange: the stream's stream.mu, a clustered stream's
// Queue.mu when it changes leader) comes before Log.mu. The methods named
// ...Locked are called with Log.mu held (Lock, Unlock).
//
// Under Log.mu the log calls only: the store's PutMeta (a segment
// record, at a roll: durable, so a roll waits for the disk) and
// AppendMessage (queued; it may wait for the store's back-pressure); a
// clustered leader's MessageLog.AppendMessage; Config.Chunks (the feature
// flag, until the segment appended to holds chunks); a Batch's Defer
// (once per pending chunk and batch). It calls OnDurable, done callbacks
// and duplicates' confirms holding none of its locks, except where a
// store calls done within AppendMessage (store.Memory always,
// store.Badger once closed): then Log.mu is held, so none of them may call
// the log's Lock or a method that takes it. It reads the store with no
// lock held where it can (Read's misses, SeekTime, the producers' scan
// ahead of a named publish); a scan that must be exact (what
// PreloadWriters left of the producers' table) holds Log.mu.
package streamlog
