package web

import (
	"math"
	"testing"
)

func TestBucketQuantile(t *testing.T) {
	bounds := []float64{0.1, 0.5, 1}
	for _, c := range []struct {
		name  string
		q     float64
		cum   []uint64
		count uint64
		want  float64
	}{
		{"empty", 0.5, []uint64{0, 0, 0}, 0, 0},
		{"first bucket, interpolated from 0", 0.5, []uint64{10, 10, 10}, 10, 0.05},
		{"second bucket", 0.5, []uint64{2, 10, 10}, 10, 0.1 + 0.4*(5-2)/8.0},
		{"p99 in the last bucket", 0.99, []uint64{0, 0, 100}, 100, 0.5 + 0.5*99/100.0},
		{"past the top bound", 0.99, []uint64{0, 0, 50}, 100, 1},
	} {
		if got := bucketQuantile(c.q, bounds, c.cum, c.count); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
