// Package raftstore keeps hashicorp/raft's log and stable state in Badger v4.
//
// One node opens one DB (Open) in its own directory, by convention
// <data_dir>/raft, and every Raft group on the node — the metadata group and
// one group per quorum queue — takes a Store from it by name (DB.Group).
// Groups are separated by key prefix, not by database: a node may carry
// thousands of quorum queues, and a Badger instance per group would cost
// memtables, file handles and goroutines per queue and one fsync stream per
// queue, where a shared instance lets Badger's write pipeline merge the
// concurrent commits of many groups into one write and one fsync. The Raft
// DB is separate from the message store (package store) because the two
// want opposite sync policies: the message store runs SyncWrites off and
// group-commits itself, the Raft log must be on disk when StoreLogs returns.
//
// # What a Store guarantees
//
//   - StoreLog and StoreLogs return after the entries are written and
//     fsynced (Badger SyncWrites). The entries of one StoreLogs call go in
//     one write batch; if Badger must split a huge batch, the parts are
//     committed in order, so a crash leaves a prefix, never a gap.
//   - DeleteRange(min, max) removes the stored entries with min ≤ index ≤
//     max, durably, in one batch.
//   - FirstIndex and LastIndex return 0 on an empty log; GetLog of an index
//     that is not stored returns raft.ErrLogNotFound.
//   - Get of a missing key and GetUint64 of a missing key return
//     ErrKeyNotFound, whose text is exactly "not found": hashicorp/raft
//     compares err.Error() with that string (api.go HasExistingState,
//     NewRaft, raft.go requestVote) to tell "never set" from a failure.
//   - Set and SetUint64 are durable when they return.
//   - Every method is safe for concurrent use. Data returned is a copy.
//   - Groups never see each other's keys; DB.DropGroup removes one group.
//
// # Encryption
//
// With Options.EncryptionKey (the node's encryption.key_file) the Badger
// instance is encrypted as the message store is (store.EncryptionOptions),
// and DB.Snapshots encrypts the groups' snapshot files (snapcrypt.go).
// Open refuses a DB or snapshot written without the key or with another
// (store.ErrNotEncrypted, store.ErrEncryptionKey); RotateEncryptionKey
// rewrites both with a new key, crash-safely (store.RewriteDir), and Open
// finishes or undoes a rotation a crash interrupted.
//
// The log codec (codec.go) is versioned and pure; it keeps every field of
// raft.Log (AppendedAt to the nanosecond, in UTC).
package raftstore
