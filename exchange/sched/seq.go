package sched

import "time"

// A held message's key in the store (its seq) is its due time in unix
// milliseconds shifted left by SeqBits, with a counter in the low bits
// (restored at a restart from the highest stored; two held messages share
// a key only if they are due in the same millisecond and 2^22 others were
// scheduled between them). A key scan is a scan in due order.
const (
	SeqBits = 22
	SeqMask = 1<<SeqBits - 1

	// MaxDelay is the longest delay in milliseconds (RabbitMQ's delayed
	// message plugin's bound: Erlang's largest timer).
	MaxDelay = 4294967295
)

// Due is the due time (unix ms) of a held message's seq.
func Due(seq uint64) int64 { return int64(seq >> SeqBits) }

// Key is the key of a message due at dueMs (unix ms) with counter ctr.
func Key(dueMs uint64, ctr uint64) uint64 { return dueMs<<SeqBits | ctr&SeqMask }

// dueAfter is the due time (unix ms) of a delay of ms from now (unix ns),
// rounded up to the millisecond: never due early.
func dueAfter(now, ms int64) uint64 {
	return uint64((now+int64(time.Millisecond)-1)/int64(time.Millisecond) + ms)
}
