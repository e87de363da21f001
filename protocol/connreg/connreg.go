// Package connreg holds what the protocol front ends share about their
// sets of open connections: listing them for management and finding one by
// name. Each server keeps its own set under its own lock and hands a
// snapshot to these functions.
package connreg

import "sort"

// Snapshot copies the keys of a server's connection set. The caller holds
// the set's lock.
func Snapshot[C comparable](set map[C]struct{}) []C {
	out := make([]C, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	return out
}

// Sorted describes each connection that info reports on (a connection
// still in its handshake reports nothing), sorted by name.
func Sorted[C, I any](conns []C, info func(C) (I, bool), name func(I) string) []I {
	out := make([]I, 0, len(conns))
	for _, c := range conns {
		if i, ok := info(c); ok {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(a, b int) bool { return name(out[a]) < name(out[b]) })
	return out
}

// Named returns the connection called want.
func Named[C any](conns []C, name func(C) string, want string) (C, bool) {
	for _, c := range conns {
		if name(c) == want {
			return c, true
		}
	}
	var zero C
	return zero, false
}
