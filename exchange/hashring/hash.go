package hashring

import "strconv"

// Hashes: FNV-1a (64-bit) of the bytes, finished by murmur3's fmix64.
// Both are fixed: no per-process seed, so every node and every restart
// computes the same bits.

// Offset is FNV-1a's offset basis: the state String and Bytes start from.
const Offset = 14695981039346656037

const prime = 1099511628211

// Absent is the hash of a header or property a message lacks.
var Absent = Mix(String(Offset, "\x00absent"))

// String is FNV-1a's state h after s.
func String(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return h
}

// Bytes is FNV-1a's state h after s.
func Bytes(h uint64, s []byte) uint64 {
	for _, c := range s {
		h ^= uint64(c)
		h *= prime
	}
	return h
}

// Mix is murmur3's 64-bit finalizer (fmix64): a bijection with full
// avalanche.
func Mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Key is the hash of s: a routing key, a header's or a property's text.
func Key(s string) uint64 { return Mix(String(Offset, s)) }

// KeyBytes is Key of s's bytes.
func KeyBytes(s []byte) uint64 { return Mix(Bytes(Offset, s)) }

// Int is the hash of n's decimal digits (so 42 and "42" agree).
func Int(n int64) uint64 {
	var buf [24]byte
	return KeyBytes(strconv.AppendInt(buf[:0], n, 10))
}

// Seed is a destination's seed: the hash of its kind ("q" a queue, "e" an
// exchange) and name.
func Seed(kind, name string) uint64 { return Mix(String(String(Offset, kind), name)) }
