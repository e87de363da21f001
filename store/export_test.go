package store

// SetRangeChunk sets how many keys a batch deletes of a range delete
// under way (the crash tests' child uses a small one).
func SetRangeChunk(n int) { rangeChunk = n }

// Linger makes the writer age batches from the start, as if the last one
// written had had its appends cancelled (call it before any write).
func (b *Badger) Linger() {
	b.mu.Lock()
	b.lingering = true
	b.mu.Unlock()
}
