package exchange

// Memory a burst took is given back when it is over. Go's maps keep the
// buckets they grew to when their entries are deleted, and a slice keeps
// its capacity, so after a fleet of 18,000 MQTT devices leaves, the
// vhost's queue map, amq.topic's binding index, its binding list and the
// topic trie node holding one child per device would keep what 18,000
// entries needed. Each of them is copied into one sized to what it holds
// once it holds less than a quarter of the most it held since the last
// copy; the copy costs what the deletes since then cost, so a delete
// stays O(1) amortized, and a structure that stays small is never copied.

// shrinkFloor is the size under which nothing is copied.
const shrinkFloor = 1024

// shrinkMap returns m, or a copy of m sized to its entries once it holds
// less than a quarter of *peak. Call it after each delete from m; *peak
// is kept by the owner of m (the most m held since its last copy).
func shrinkMap[K comparable, V any](m map[K]V, peak *int) map[K]V {
	n := len(m)
	if n+1 > *peak {
		*peak = n + 1 // it held one more before this delete
	}
	if *peak < shrinkFloor || n >= *peak/4 {
		return m
	}
	c := make(map[K]V, n)
	for k, v := range m {
		c[k] = v
	}
	*peak = n
	return c
}

// shrinkSlice returns s, or a copy of s with room for twice its length
// once its length is under a quarter of its capacity.
func shrinkSlice[T any](s []T) []T {
	if cap(s) < shrinkFloor || len(s) >= cap(s)/4 {
		return s
	}
	return append(make([]T, 0, 2*len(s)), s...)
}
