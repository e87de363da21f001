package hashring

import (
	"strconv"
	"strings"
)

// MaxWeight bounds a binding's effective weight, so that weights summed
// over a destination's bindings cannot overflow; a larger weight is
// accepted (as RabbitMQ's plugin accepts any positive integer) and counts
// as this one.
const MaxWeight = 1 << 40

// WeightError is a binding key that is not a weight; its text is the
// plugin's (the core answers it as PRECONDITION_FAILED).
type WeightError struct{ msg string }

func (e *WeightError) Error() string { return e.msg }

// ParseWeight parses a consistent-hash binding key as Erlang's
// list_to_integer does (an optional sign, then decimal digits only): a
// positive integer, at most MaxWeight.
func ParseWeight(key string) (uint64, error) {
	digits, neg := key, false
	if digits != "" && (digits[0] == '+' || digits[0] == '-') {
		digits, neg = digits[1:], digits[0] == '-'
	}
	valid := digits != ""
	for i := 0; i < len(digits) && valid; i++ {
		valid = digits[i] >= '0' && digits[i] <= '9'
	}
	if !valid {
		return 0, &WeightError{"The binding key must be an integer: <<" + strconv.Quote(key) + ">>"}
	}
	if neg || strings.Trim(digits, "0") == "" {
		return 0, &WeightError{"The binding key must be greater than 0"}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n > MaxWeight {
		n = MaxWeight // out of range: a very large positive weight
	}
	return n, nil
}

// Weight is a binding's weight in a ring; 0 (never chosen) for a key that
// ParseWeight refuses, which only a record written by something else
// could hold.
func Weight(key string) uint64 {
	w, err := ParseWeight(key)
	if err != nil {
		return 0
	}
	return w
}
