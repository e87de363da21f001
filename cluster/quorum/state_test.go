package quorum

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// model is the obvious reference the ordered slice is checked against.
type model map[uint64]entry

func (md model) apply(o op) {
	switch o.kind {
	case opAppend:
		e := md[o.seq]
		md[o.seq] = entry{seq: o.seq, data: o.data, returns: e.returns}
	case opDelete:
		delete(md, o.seq)
	case opReturn:
		if e, ok := md[o.seq]; ok {
			e.returns++
			md[o.seq] = e
		}
	}
}

func (md model) sorted() []entry {
	out := make([]entry, 0, len(md))
	for _, e := range md {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int {
		if a.seq < b.seq {
			return -1
		}
		if a.seq > b.seq {
			return 1
		}
		return 0
	})
	return out
}

func checkInvariants(t testing.TB, m *messages) {
	t.Helper()
	live, dead, size := 0, 0, int64(0)
	for i := m.head; i < len(m.ents); i++ {
		e := m.ents[i]
		if i > m.head && m.ents[i-1].seq >= e.seq {
			t.Fatalf("slot %d seq %d after %d", i, e.seq, m.ents[i-1].seq)
		}
		if e.dead {
			dead++
			if e.data != nil {
				t.Fatalf("dead slot %d keeps data", i)
			}
		} else {
			live++
			size += int64(len(e.data))
		}
	}
	if live != m.live || dead != m.dead || size != m.bytes {
		t.Fatalf("counts live %d dead %d bytes %d, recorded %d %d %d", live, dead, size, m.live, m.dead, m.bytes)
	}
	if m.head < len(m.ents) && m.ents[m.head].dead {
		t.Fatalf("head slot %d is dead", m.head)
	}
}

func equalEntries(a, b []entry) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d messages vs %d", len(a), len(b))
	}
	for i := range a {
		if a[i].seq != b[i].seq || a[i].returns != b[i].returns || !bytes.Equal(a[i].data, b[i].data) {
			return fmt.Errorf("message %d: seq %d returns %d %q vs seq %d returns %d %q",
				i, a[i].seq, a[i].returns, a[i].data, b[i].seq, b[i].returns, b[i].data)
		}
	}
	return nil
}

// TestMessagesAgainstModel runs random op streams of several shapes
// (FIFO, random seqs, out-of-order inserts) against the map model.
func TestMessagesAgainstModel(t *testing.T) {
	shapes := []struct {
		name string
		seq  func(r *rand.Rand, next *uint64) uint64
	}{
		{"fifo", func(r *rand.Rand, next *uint64) uint64 { *next++; return *next }},
		{"random small", func(r *rand.Rand, _ *uint64) uint64 { return r.Uint64N(200) }},
		{"mostly increasing", func(r *rand.Rand, next *uint64) uint64 {
			*next++
			if r.IntN(10) == 0 {
				return *next - r.Uint64N(*next)
			}
			return *next
		}},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var m messages
			md := model{}
			var next, low uint64
			for i := 0; i < 20000; i++ {
				var o op
				switch k := r.IntN(10); {
				case k < 5:
					o = op{kind: opAppend, seq: sh.seq(r, &next), data: []byte(fmt.Sprint(i))}
				case k < 9:
					// Mostly delete the oldest, as a queue does.
					if r.IntN(2) == 0 {
						low++
						o = op{kind: opDelete, seq: low}
					} else {
						o = op{kind: opDelete, seq: r.Uint64N(next + 10)}
					}
				default:
					o = op{kind: opReturn, seq: r.Uint64N(next + 10)}
				}
				m.apply(o)
				md.apply(o)
				if i%997 == 0 {
					checkInvariants(t, &m)
					if err := equalEntries(m.liveSlots(), md.sorted()); err != nil {
						t.Fatalf("after op %d: %v", i, err)
					}
				}
			}
			checkInvariants(t, &m)
			if err := equalEntries(m.liveSlots(), md.sorted()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMessagesCompaction(t *testing.T) {
	var m messages
	for i := uint64(0); i < 100000; i++ {
		m.put(i, nil)
		if i >= 10 {
			m.del(i - 10)
		}
	}
	checkInvariants(t, &m)
	if m.live != 10 || len(m.ents) > 1000 {
		t.Fatalf("live %d, slice %d: FIFO garbage not reclaimed", m.live, len(m.ents))
	}
	for i := uint64(0); i < 100000; i++ {
		m.del(i)
	}
	if m.live != 0 || cap(m.ents) > 4*compactMin {
		t.Fatalf("live %d, cap %d after deleting everything", m.live, cap(m.ents))
	}
}

func TestMessagesReturnsSaturate(t *testing.T) {
	var m messages
	m.put(1, []byte("x"))
	m.ents[0].returns = 1<<32 - 2
	m.ret(1)
	m.ret(1)
	if got := m.ents[0].returns; got != 1<<32-1 {
		t.Fatalf("returns = %d", got)
	}
	m.put(1, []byte("y")) // a replace keeps the count
	if got := m.ents[0].returns; got != 1<<32-1 {
		t.Fatalf("returns after replace = %d", got)
	}
}
