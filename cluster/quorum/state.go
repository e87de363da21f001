package quorum

import (
	"encoding/binary"
	"math"
	"slices"
)

// What an FSM keeps in memory is a handful of counters, never a message:
// the bodies live in the node's message store (Store), keyed as the core
// keys them, and the FSM knows of them only per group of keys that share
// their top byte (the core puts a priority level there).

// Group describes the messages whose keys share their top byte.
type Group struct {
	Top    byte
	Count  int64
	Bytes  int64  // the sum of their data sizes (see state.del)
	MaxKey uint64 // the largest key ever appended to the group
}

// state is an FSM's replicated state at its applied index: counts per
// group and the return counts of messages that came back. It is what a
// state record and a snapshot's header hold. Not safe for concurrent
// use: the FSM holds its lock.
type state struct {
	applied uint64
	// stored is the last entry whose ops all reached the Store (the
	// buffered appends of write-behind are the ops that have not): a
	// restart applies the ops of the entries after it to the Store again,
	// and counts only those after applied. stored <= applied.
	stored uint64
	// appended counts the bytes appended since the last snapshot: about
	// what the Raft log holds beyond it (FSM.SnapshotDue).
	appended int64
	// held counts held messages (opHold, not yet released).
	held    int64
	groups  []Group           // sorted by Top, only groups ever appended to
	returns map[uint64]uint32 // key → returns, for messages returned at least once
}

func (s *state) group(top byte) *Group {
	i, ok := slices.BinarySearchFunc(s.groups, top, func(g Group, t byte) int { return int(g.Top) - int(t) })
	if !ok {
		s.groups = slices.Insert(s.groups, i, Group{Top: top})
	}
	return &s.groups[i]
}

// add counts an appended message. The core never appends a key twice.
func (s *state) add(key uint64, size int) {
	g := s.group(byte(key >> 56))
	g.Count++
	g.Bytes += int64(size)
	s.appended += int64(size)
	if key > g.MaxKey {
		g.MaxKey = key
	}
}

// del counts a deleted message. The core deletes only keys it appended,
// once; a delete op carries no size, so the group's bytes shrink by its
// average message (exact for equal sizes, and back to 0 when it empties):
// the figure is an estimate the core corrects as it reads messages.
func (s *state) del(key uint64) {
	delete(s.returns, key)
	g := s.group(byte(key >> 56))
	if g.Count <= 0 {
		return
	}
	g.Bytes -= g.Bytes / g.Count
	g.Count--
	if g.Count == 0 {
		g.Bytes = 0
	}
}

// delRange counts the deletion of the keys in [from, to), one group's
// (validRange), which held count messages of bytes bytes. The figures are
// the proposer's, so they are clamped to what the group holds; bytes go
// to 0 when the group empties. Return counts of keys in the range go.
func (s *state) delRange(from, to uint64, count, bytes int64) {
	for k := range s.returns {
		if k >= from && k < to {
			delete(s.returns, k)
		}
	}
	g := s.group(byte(from >> 56))
	n := min(max(count, 0), g.Count)
	g.Count -= n
	g.Bytes -= min(max(bytes, 0), g.Bytes)
	if g.Count == 0 {
		g.Bytes = 0
	}
}

// ret counts one return of key, saturating at the largest uint32.
func (s *state) ret(key uint64) {
	if s.returns == nil {
		s.returns = map[uint64]uint32{}
	}
	if n := s.returns[key]; n < math.MaxUint32 {
		s.returns[key] = n + 1
	}
}

func (s *state) count() int64 {
	var n int64
	for _, g := range s.groups {
		n += g.Count
	}
	return n
}

func (s *state) bytes() int64 {
	var n int64
	for _, g := range s.groups {
		n += g.Bytes
	}
	return n
}

func (s *state) clone() state {
	c := state{applied: s.applied, stored: s.stored, appended: s.appended, held: s.held, groups: slices.Clone(s.groups)}
	if len(s.returns) > 0 {
		c.returns = make(map[uint64]uint32, len(s.returns))
		for k, v := range s.returns {
			c.returns[k] = v
		}
	}
	return c
}

// A state is encoded as
//
//	state  = version:byte applied:uvarint appended:uvarint unstored:uvarint held:uvarint ngroups:uvarint group{ngroups} nreturns:uvarint return{nreturns}
//	group  = top:byte count:uvarint bytes:uvarint maxKey:uvarint
//	return = key:uvarint returns:uvarint
//
// with groups in increasing top order and returns in increasing key order.
// unstored is applied - stored. Earlier builds wrote 0 there (it held the
// last snapshot's message bytes once, and then nothing), which reads as
// stored = applied: what their records meant.

const stateVersion byte = 2

func (s *state) encode(dst []byte) []byte {
	dst = append(dst, stateVersion)
	dst = binary.AppendUvarint(dst, s.applied)
	dst = binary.AppendUvarint(dst, uint64(max(s.appended, 0)))
	dst = binary.AppendUvarint(dst, s.applied-min(s.stored, s.applied))
	dst = binary.AppendUvarint(dst, uint64(max(s.held, 0)))
	dst = binary.AppendUvarint(dst, uint64(len(s.groups)))
	for _, g := range s.groups {
		dst = append(dst, g.Top)
		dst = binary.AppendUvarint(dst, uint64(max(g.Count, 0)))
		dst = binary.AppendUvarint(dst, uint64(max(g.Bytes, 0)))
		dst = binary.AppendUvarint(dst, g.MaxKey)
	}
	keys := make([]uint64, 0, len(s.returns))
	for k := range s.returns {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, k := range keys {
		dst = binary.AppendUvarint(dst, k)
		dst = binary.AppendUvarint(dst, uint64(s.returns[k]))
	}
	return dst
}

// decodeState decodes what encode wrote; malformed input is an error
// wrapping ErrCorrupt. It allocates no more than the input backs.
func decodeState(b []byte) (state, error) {
	var s state
	if len(b) == 0 || b[0] != stateVersion {
		return s, corruptf("state version")
	}
	i := 1
	next := func(what string) (uint64, error) {
		v, n := binary.Uvarint(b[i:])
		if n <= 0 {
			return 0, corruptf("state: bad %s at offset %d", what, i)
		}
		i += n
		return v, nil
	}
	var err error
	if s.applied, err = next("applied index"); err != nil {
		return s, err
	}
	app, err := next("appended bytes")
	if err != nil {
		return s, err
	}
	if app > math.MaxInt64 {
		return s, corruptf("state: appended %d", app)
	}
	s.appended = int64(app)
	un, err := next("unstored span")
	if err != nil {
		return s, err
	}
	if un > s.applied {
		return s, corruptf("state: unstored span %d past applied %d", un, s.applied)
	}
	s.stored = s.applied - un
	hd, err := next("held count")
	if err != nil {
		return s, err
	}
	if hd > math.MaxInt64 {
		return s, corruptf("state: held %d", hd)
	}
	s.held = int64(hd)
	ng, err := next("group count")
	if err != nil {
		return s, err
	}
	if ng > 256 || ng > uint64(len(b)-i)/4 {
		return s, corruptf("state: %d groups", ng)
	}
	for j := uint64(0); j < ng; j++ {
		if i >= len(b) {
			return s, corruptf("state: truncated group")
		}
		g := Group{Top: b[i]}
		i++
		c, err := next("count")
		if err != nil {
			return s, err
		}
		by, err := next("bytes")
		if err != nil {
			return s, err
		}
		if g.MaxKey, err = next("max key"); err != nil {
			return s, err
		}
		if c > math.MaxInt64 || by > math.MaxInt64 {
			return s, corruptf("state: group counts out of range")
		}
		if len(s.groups) > 0 && s.groups[len(s.groups)-1].Top >= g.Top {
			return s, corruptf("state: groups out of order")
		}
		g.Count, g.Bytes = int64(c), int64(by)
		s.groups = append(s.groups, g)
	}
	nr, err := next("return count")
	if err != nil {
		return s, err
	}
	if nr > uint64(len(b)-i)/2 {
		return s, corruptf("state: %d returns", nr)
	}
	if nr > 0 {
		s.returns = make(map[uint64]uint32, nr)
	}
	for j := uint64(0); j < nr; j++ {
		k, err := next("return key")
		if err != nil {
			return s, err
		}
		n, err := next("returns")
		if err != nil {
			return s, err
		}
		if n > math.MaxUint32 {
			return s, corruptf("state: returns %d", n)
		}
		s.returns[k] = uint32(n)
	}
	if i != len(b) {
		return s, corruptf("state: %d bytes after the end", len(b)-i)
	}
	return s, nil
}
