package auth

import "strings"

// authPrefixes are the key prefixes of auth's records: in a cluster they
// are replicated through the metadata group.
var authPrefixes = []string{userPrefix, permPrefix, topicPermPrefix}

// ReplicatedKey reports whether key is a user, permission or topic
// permission record's.
func ReplicatedKey(key string) bool {
	for _, p := range authPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// touches reports whether a write under key (a record, or a prefix
// delete) may change one of auth's records.
func touches(key string) bool {
	for _, p := range authPrefixes {
		if strings.HasPrefix(key, p) || strings.HasPrefix(p, key) {
			return true
		}
	}
	return false
}

// ApplyMeta brings memory in line with the store after the cluster wrote
// records under keys (puts, deletes or prefix deletes, already in the
// store): when one of them is auth's, every user, permission and topic
// permission is reloaded. It is idempotent and never writes.
//
// In a cluster, ApplyMeta runs while a local writer (PutUser...) may hold
// the writers' lock waiting for its own record to commit. It therefore
// never waits for that lock: it publishes the reloaded state at once, and
// if a writer was busy it reloads again once the writer is done, so the
// writer's snapshot swap cannot hide a record applied meanwhile.
func (us *Users) ApplyMeta(keys []string) {
	touched := false
	for _, k := range keys {
		if touches(k) {
			touched = true
			break
		}
	}
	if !touched {
		return
	}
	if us.mu.TryLock() {
		us.reload()
		us.mu.Unlock()
		return
	}
	us.reload()
	us.reloadLater()
}

// reloadLater reloads once the writer holding mu is done (once, however
// many ask meanwhile).
func (us *Users) reloadLater() {
	if us.reloadPending.CompareAndSwap(false, true) {
		go func() {
			us.mu.Lock()
			us.reloadPending.Store(false)
			us.reload()
			us.mu.Unlock()
		}()
	}
}

// reload replaces the snapshot with the store's records. Orphan records
// (a permission applied before its user) are left for a later reload.
func (us *Users) reload() {
	s, _, err := loadSnapshot(us.st)
	if err != nil {
		us.log.Error("auth: reload after a cluster change", "err", err)
		return
	}
	us.snap.Store(s)
}
