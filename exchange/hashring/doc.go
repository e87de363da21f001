// Package hashring chooses one destination of a hash exchange for a
// message: the weighted rendezvous hashing of x-consistent-hash and the
// modulus of x-modulus-hash, over a Ring of destinations, and the fixed
// hashes they use (FNV-1a finished by murmur3's fmix64). It knows no
// exchange, binding or message: the core (exchange/hashx.go) keys a Ring
// by its own destination type, decides what of a message is hashed, and
// validates the exchange's arguments.
//
// # Guarantees
//
//   - A key's destination is a pure function of the key's hash and the
//     set of (destination, weight) pairs: the same on every node, after a
//     restart, whatever order the destinations were added in. There is no
//     per-process seed and no floating point (a table-driven fixed-point
//     log2), so every CPU computes the same bits.
//   - Pick chooses destination d with probability w(d)/Σw; adding,
//     removing or re-weighting one destination moves keys only to or from
//     it.
//   - Pick and Modulus allocate nothing and only read the Ring.
//
// # Locks
//
// None. A Ring made by New is changed by Take, Release, Reweigh and
// SortByName, which its owner serialises (the core: under its topology
// lock); a Clone is only read, by any number of goroutines at once (the
// core's copy-on-write routing table).
package hashring
