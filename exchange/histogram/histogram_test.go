package histogram

import (
	"math"
	"testing"
	"time"
)

// TestHistogramLayout checks what the histogram's layout relies on: one
// classic counter per bound plus +Inf, a native zero bucket below the
// first classic bound, and as many slots as the native buckets cut at the
// classic bounds need.
func TestHistogramLayout(t *testing.T) {
	if nClassic != len(ClassicBounds)+1 {
		t.Errorf("nClassic %d for %d classic bounds", nClassic, len(ClassicBounds))
	}
	if zeroNs >= classicNs[0] {
		t.Errorf("the native zero bucket (%d ns) passes the first classic bucket (%d ns)", zeroNs, classicNs[0])
	}
	if slotBase[nNative] != nSlots {
		t.Errorf("the slots' layout uses %d slots, nSlots is %d", slotBase[nNative], nSlots)
	}
}

func TestHistogramBuckets(t *testing.T) {
	for _, tc := range []struct {
		d       time.Duration
		classic float64 // the smallest classic bound that holds d
	}{
		{0, 0.0001},
		{time.Microsecond, 0.0001},
		{7629 * time.Nanosecond, 0.0001}, // the last of the zero bucket
		{7630 * time.Nanosecond, 0.0001}, // the first past it
		{300 * time.Millisecond, 0.5},
		{time.Second, 1},
		{2 * time.Second, 2.5},
		{time.Hour, math.Inf(1)},
	} {
		var h Histogram
		h.Observe(int64(tc.d))
		s := h.Snapshot()
		if s.Count != 1 || math.Abs(s.Sum-tc.d.Seconds()) > 1e-9 {
			t.Fatalf("%v: count %d sum %v", tc.d, s.Count, s.Sum)
		}
		for i, b := range ClassicBounds {
			want := uint64(0)
			if b >= tc.classic {
				want = 1
			}
			if s.Classic[i] != want {
				t.Fatalf("%v: classic bucket le=%v holds %d, want %d", tc.d, b, s.Classic[i], want)
			}
		}
		v := tc.d.Seconds()
		if v <= NativeZeroThreshold {
			if s.ZeroCount != 1 || len(s.Native) != 0 {
				t.Fatalf("%v: zero %d native %v", tc.d, s.ZeroCount, s.Native)
			}
			continue
		}
		if len(s.Native) != 1 || s.Native[0] != 1 {
			t.Fatalf("%v: native %v", tc.d, s.Native)
		}
		// Native bucket i of schema 2 is (2^((i-1)/4), 2^(i/4)].
		i := float64(s.NativeOffset)
		lo, hi := math.Exp2((i-1)/4), math.Exp2(i/4)
		if i < nativeMaxKey && (v <= lo*(1-1e-12) || v > hi*(1+1e-12)) {
			t.Fatalf("%v: in native bucket %v = (%v, %v]", tc.d, i, lo, hi)
		}
	}
}

func TestHistogramPowersOfTwo(t *testing.T) {
	// An exact power of two closes its bucket: 1 s is bucket 0, 2 s bucket 4.
	for _, c := range []struct {
		ns  int64
		key int32
	}{{1e9, 0}, {2e9, 4}, {5e8, -4}} {
		var h Histogram
		h.Observe(c.ns)
		if s := h.Snapshot(); s.NativeOffset != c.key {
			t.Fatalf("%d ns: bucket %d, want %d", c.ns, s.NativeOffset, c.key)
		}
	}
}

func BenchmarkHistogramObserve(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		h.Observe(int64(i) * 997)
	}
}

// BenchmarkHistogramObserveZero is the hot path's case: a message
// delivered as it is published waits 0 ns by the batch clock.
func BenchmarkHistogramObserveZero(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		h.Observe(0)
	}
}

// TestHistogramMatchesReference checks Observe's bucket arithmetic (float
// bits and the classic start table) against the plain definition, over
// values spread across every bucket and the bounds themselves.
func TestHistogramMatchesReference(t *testing.T) {
	ref := func(ns int64) (native, classic int) {
		classic = 0
		for classic < len(classicNs) && ns > classicNs[classic] {
			classic++
		}
		frac, exp := math.Frexp(float64(ns) * 1e-9)
		k := 0
		for k < 4 && nativeFracs[k] < frac {
			k++
		}
		key := min(max((exp-1)*4+k, nativeMinKey+1), nativeMaxKey)
		return key - nativeMinKey, classic
	}
	vals := []int64{zeroNs + 1, 1 << 62}
	for _, b := range classicNs {
		vals = append(vals, b-1, b, b+1)
	}
	for i := 0; i < nNative; i++ {
		b := int64(math.Exp2(float64(i+nativeMinKey)/4) * 1e9)
		vals = append(vals, b-1, b, b+1)
	}
	for v := zeroNs + 1; v < 1<<50; v = v*1009/1000 + 1 {
		vals = append(vals, v)
	}
	for _, ns := range vals {
		if ns <= zeroNs {
			continue
		}
		var h Histogram
		h.Observe(ns)
		wn, wc := ref(ns)
		s := h.Snapshot()
		gn := int(s.NativeOffset) - nativeMinKey
		gc := 0 // the classic bucket: the first whose cumulative count is 1
		for gc < len(s.Classic) && s.Classic[gc] == 0 {
			gc++
		}
		if s.Count != 1 || len(s.Native) != 1 || s.Native[0] != 1 || gn != wn || gc != wc {
			t.Fatalf("%d ns: want native %d classic %d; got native %d %v classic %d %v count %d", ns, wn, wc, gn, s.Native, gc, s.Classic, s.Count)
		}
	}
}
