package store

// SetRangeChunk sets how many keys a batch deletes of a range delete
// under way (the crash tests' child uses a small one).
func SetRangeChunk(n int) { rangeChunk = n }
