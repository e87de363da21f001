package exchange

import (
	"math/rand/v2"
	"testing"
)

// TestUnackedSetModel checks the set against a map under random mixes of
// in-order deliveries, out-of-order and in-order settles, redeliveries
// of old seqs behind the run, entries left unacked while the rest flows
// (the sparse ring evicting to its map) and clears.
func TestUnackedSetModel(t *testing.T) {
	for round := 0; round < 200; round++ {
		r := rand.New(rand.NewPCG(uint64(round), 7))
		var s unackedSet
		model := map[uint64]bool{}
		next := uint64(1 + r.IntN(1000))
		live := func() []uint64 {
			out := make([]uint64, 0, len(model))
			for k := range model {
				out = append(out, k)
			}
			return out
		}
		for step := 0; step < 3000; step++ {
			switch x := r.IntN(100); {
			case x < 45: // deliver the next seq (sometimes skipping: no-ack or expired ones)
				next += 1 + uint64(r.IntN(3)/2)*uint64(r.IntN(50))
				s.put(next, unackedEntry{e: entry{seq: next}})
				model[next] = true
			case x < 50: // a requeued old message delivered again
				old := next - uint64(r.IntN(int(min(next, 5000))))
				if !model[old] {
					s.put(old, unackedEntry{e: entry{seq: old}})
					model[old] = true
				}
			case x < 85: // settle the oldest or a random live one
				l := live()
				if len(l) == 0 {
					break
				}
				k := l[r.IntN(len(l))]
				if x < 70 {
					for _, v := range l {
						k = min(k, v)
					}
				}
				u, ok := s.take(k)
				if !ok || u.e.seq != k {
					t.Fatalf("round %d step %d: take(%d) = %v %v", round, step, k, u.e.seq, ok)
				}
				delete(model, k)
			case x < 97: // settle a seq that is not there
				k := next - uint64(r.IntN(int(min(next, 200))))
				if !model[k] {
					if _, ok := s.take(k); ok {
						t.Fatalf("round %d step %d: took absent %d", round, step, k)
					}
				}
			case x < 98:
				if r.IntN(2) == 0 { // settle every ring entry, keep the map's
					for _, k := range live() {
						if k >= s.base && k < s.hi {
							if _, ok := s.take(k); !ok {
								t.Fatalf("round %d step %d: take(%d) in the run", round, step, k)
							}
							delete(model, k)
						}
					}
					break
				}
				n := 0
				s.clear(func(*unackedEntry) { n++ })
				if n != len(model) {
					t.Fatalf("clear saw %d, model %d", n, len(model))
				}
				clear(model)
			default: // jump far ahead (a long run of no-ack deliveries)
				next += uint64(r.IntN(1 << 20))
			}
			if s.len() != len(model) {
				t.Fatalf("round %d step %d: len %d, model %d", round, step, s.len(), len(model))
			}
			if len(s.ring) > 4*(s.n+1)+4*minUnackedRing && len(s.ring) > 4*len(model)+4*minUnackedRing {
				t.Fatalf("round %d step %d: ring %d for %d live", round, step, len(s.ring), s.len())
			}
		}
		seen := map[uint64]bool{}
		s.each(func(seq uint64, u *unackedEntry) {
			if !model[seq] || seen[seq] || u.e.seq != seq {
				t.Fatalf("round %d: each gave %d (entry %d)", round, seq, u.e.seq)
			}
			seen[seq] = true
		})
		if len(seen) != len(model) {
			t.Fatalf("round %d: each gave %d, model %d", round, len(seen), len(model))
		}
	}
}

// TestUnackedSetMapInsideRun: an entry put in the map (behind the run)
// stays reachable when the ring, emptied, starts again below it and its
// run grows past it — the shape of requeued messages delivered again.
func TestUnackedSetMapInsideRun(t *testing.T) {
	var s unackedSet
	for seq := uint64(100); seq < 110; seq++ {
		s.put(seq, unackedEntry{e: entry{seq: seq}})
	}
	s.put(50, unackedEntry{e: entry{seq: 50}}) // behind the run: the map
	for seq := uint64(100); seq < 110; seq++ {
		if _, ok := s.take(seq); !ok {
			t.Fatalf("take(%d)", seq)
		}
	}
	s.put(40, unackedEntry{e: entry{seq: 40}}) // the ring starts again at 40
	s.put(60, unackedEntry{e: entry{seq: 60}}) // and its run passes 50
	for _, seq := range []uint64{50, 40, 60} {
		if u, ok := s.take(seq); !ok || u.e.seq != seq {
			t.Fatalf("take(%d) = %d, %v", seq, u.e.seq, ok)
		}
	}
	if s.len() != 0 {
		t.Fatalf("len %d", s.len())
	}
}

// BenchmarkUnacked: a consumer with a prefetch of 1000 settling in order,
// the queue's steady state; the set against the map it replaced.
func BenchmarkUnacked(b *testing.B) {
	const window = 1000
	b.Run("set", func(b *testing.B) {
		var s unackedSet
		b.ReportAllocs()
		for i := uint64(1); i <= uint64(b.N); i++ {
			s.put(i, unackedEntry{e: entry{seq: i}})
			if i > window {
				s.take(i - window)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[uint64]unackedEntry{}
		b.ReportAllocs()
		for i := uint64(1); i <= uint64(b.N); i++ {
			m[i] = unackedEntry{e: entry{seq: i}}
			if i > window {
				delete(m, i-window)
			}
		}
	})
}
