package store

import (
	"math/rand/v2"
	"testing"
)

// TestOpIndexModel: random puts, takes and resets of an opIndex agree
// with a map, over keys that collide (few queues, consecutive and
// scattered seqs) and across growth and backward-shift deletion.
func TestOpIndexModel(t *testing.T) {
	type key struct{ qid, seq uint64 }
	for round := range 20 {
		r := rand.New(rand.NewPCG(uint64(round), 7))
		var x opIndex
		model := map[key]int{}
		keys := []key{}
		for step := range 20000 {
			switch op := r.IntN(10); {
			case op < 5 || len(keys) == 0:
				k := key{uint64(r.IntN(3)), uint64(r.IntN(4000))}
				if r.IntN(4) == 0 {
					k.seq = r.Uint64()
				}
				x.put(k.qid, k.seq, step)
				if _, ok := model[k]; !ok {
					keys = append(keys, k)
				}
				model[k] = step
			case op < 9:
				i := r.IntN(len(keys))
				k := keys[i]
				if r.IntN(5) == 0 {
					k.seq++ // often absent
				}
				at, ok := x.take(k.qid, k.seq)
				want, wok := model[k]
				if ok != wok || at != want {
					t.Fatalf("round %d step %d: take %v = %d, %v; want %d, %v", round, step, k, at, ok, want, wok)
				}
				if wok {
					delete(model, k)
				}
				if keys[i] == k {
					keys[i] = keys[len(keys)-1]
					keys = keys[:len(keys)-1]
				}
			default:
				if r.IntN(50) == 0 {
					x.reset()
					clear(model)
					keys = keys[:0]
				}
			}
			if x.n != len(model) {
				t.Fatalf("round %d step %d: %d entries, model %d", round, step, x.n, len(model))
			}
		}
		for k, want := range model {
			if at, ok := x.take(k.qid, k.seq); !ok || at != want {
				t.Fatalf("round %d: final take %v = %d, %v; want %d", round, k, at, ok, want)
			}
		}
		if x.n != 0 {
			t.Fatalf("round %d: %d left", round, x.n)
		}
	}
}

func BenchmarkOpIndex(b *testing.B) {
	var x opIndex
	b.ReportAllocs()
	for i := range b.N {
		seq := uint64(i)
		x.put(uint64(i&3), seq, i&4095)
		if i >= 1000 {
			x.take(uint64((i-1000)&3), seq-1000)
		}
	}
}
