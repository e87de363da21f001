package hashring

import "math/bits"

// negLog2 is -log2(u) for u = (h|1)/2^64 in (0,1), in fixed point with 32
// fractional bits (at most 64<<32): an exponential variable, up to scale.
func negLog2(h uint64) uint64 {
	return 64<<32 - log2Fixed(h|1)
}

// log2Fixed is log2(x) for x ≥ 1 with 32 fractional bits: the exponent,
// plus log2 of the mantissa from log2Table, interpolated linearly
// (error below 2e-7). Monotone in x.
func log2Fixed(x uint64) uint64 {
	e := uint64(63 - bits.LeadingZeros64(x))
	f := x << (64 - e) // the mantissa's fraction bits (the leading 1 dropped; 0 for x = 1)
	i := f >> (64 - log2TableBits)
	rem := (f >> (64 - log2TableBits - 32)) & (1<<32 - 1)
	lo, hi := log2Table[i], log2Table[i+1]
	return e<<32 + lo + ((hi-lo)*rem)>>32
}

const log2TableBits = 10

// log2Table[i] is log2(1 + i/1024) with 32 fractional bits, computed by
// integer arithmetic alone (log2Frac) so that it is the same on every CPU.
var log2Table = func() (t [1<<log2TableBits + 1]uint64) {
	for i := range t {
		t[i] = log2Frac(uint64(1<<log2TableBits + i))
	}
	return t
}()

// log2Frac returns log2(m/1024) for m in [1024, 2048], 32 fractional bits,
// rounded: by repeated squaring in fixed point with 62 fractional bits.
func log2Frac(m uint64) uint64 {
	if m == 2<<log2TableBits {
		return 1 << 32
	}
	const one = uint64(1) << 62
	y := m << (62 - log2TableBits) // in [1, 2)
	var r uint64
	for k := 0; k < 34; k++ {
		hi, lo := bits.Mul64(y, y)
		y = hi<<2 | lo>>62 // y² with 62 fractional bits, in [1, 4)
		r <<= 1
		if y >= 2*one {
			r |= 1
			y >>= 1
		}
	}
	return (r + 2) >> 2 // 34 bits to 32, rounded
}
