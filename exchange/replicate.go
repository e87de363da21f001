package exchange

// Records every node of a cluster holds that are not topology commands:
// a stream's named offsets (streamoff/), a quorum queue's or stream's
// members record after its group grew or shrank (SetQueueMembers), and a
// restarted node's deletes of its stale transient records
// (recoverTransient). The core writes each of them by calling replicate
// or replicatePrefix, which name the intent: in a cluster they go through
// the Replicator (the metadata group), standalone to the store as any
// record. Nothing is decided by a record's key: the store the core is
// given is the node's own, and in a cluster the replicated topology
// records reach it only through the metadata group's applier. (A stream
// deleted by a committed command is the exception that proposes nothing:
// its offsets' delete is one of the command's records,
// dropCommittedStream.)

// Replicator writes records cluster-wide and returns once they are
// committed: the node's metadata group (cluster/meta.Replicator).
type Replicator interface {
	// ReplicateMeta writes keys[i] = vals[i], or deletes keys[i] when
	// vals[i] is nil.
	ReplicateMeta(keys []string, vals [][]byte) error
	// ReplicateDeletePrefix deletes every record whose key starts with
	// prefix.
	ReplicateDeletePrefix(prefix string) error
}

// WithReplicator makes the broker write its cluster-wide records that are
// not topology commands through r (a clustered node's; standalone none).
func WithReplicator(r Replicator) Option {
	return func(b *Broker) { b.repl = r }
}

// replicate writes the record key, cluster-wide through the Replicator
// if the broker has one, else to the store.
func (b *Broker) replicate(key string, val []byte) error {
	if b.repl == nil {
		return b.store.PutMeta(key, val)
	}
	if val == nil {
		val = []byte{} // nil is a delete
	}
	return b.repl.ReplicateMeta([]string{key}, [][]byte{val})
}

// unreplicate deletes the record key as replicate writes it.
func (b *Broker) unreplicate(key string) error {
	if b.repl == nil {
		return b.store.DeleteMeta(key)
	}
	return b.repl.ReplicateMeta([]string{key}, [][]byte{nil})
}

// replicatePrefix deletes every record under prefix as replicate writes
// them.
func (b *Broker) replicatePrefix(prefix string) error {
	if b.repl == nil {
		return b.store.DeleteMetaPrefix(prefix)
	}
	return b.repl.ReplicateDeletePrefix(prefix)
}
