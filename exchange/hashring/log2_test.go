package hashring

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestLog2Fixed(t *testing.T) {
	for i, v := range log2Table {
		want := math.Log2(1+float64(i)/1024) * (1 << 32)
		if math.Abs(float64(v)-want) > 1 {
			t.Fatalf("log2Table[%d] = %d, want %.1f", i, v, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	xs := []uint64{1, 2, 3, 1 << 63, math.MaxUint64}
	for range 100000 {
		xs = append(xs, r.Uint64()>>r.IntN(64)|1)
	}
	for _, x := range xs {
		got := float64(log2Fixed(x)) / (1 << 32)
		if want := math.Log2(float64(x)); math.Abs(got-want) > 3e-7 {
			t.Fatalf("log2Fixed(%d) = %.9f, want %.9f", x, got, want)
		}
	}
	slices.Sort(xs)
	for i := 1; i < len(xs); i++ {
		if log2Fixed(xs[i]) < log2Fixed(xs[i-1]) {
			t.Fatalf("log2Fixed not monotone at %d", xs[i])
		}
	}
}
