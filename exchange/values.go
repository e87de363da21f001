package exchange

import (
	"bytes"
	"math"
	"reflect"
	"strconv"
	"time"
)

// asInt64 converts any integer or integral float value to int64.
func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	case float32:
		if float32(int64(n)) == n {
			return int64(n), true
		}
	case float64:
		if float64(int64(n)) == n {
			return int64(n), true
		}
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float32:
		return float64(n), true
	case float64:
		return n, true
	}
	if i, ok := asInt64(v); ok {
		if _, isStr := v.(string); !isStr {
			return float64(i), true
		}
	}
	return 0, false
}

// valuesEqual compares two table values, numbers by value whatever their
// width, as RabbitMQ's headers exchange does.
func valuesEqual(a, b any) bool {
	switch av := a.(type) {
	case string:
		switch bv := b.(type) {
		case string:
			return av == bv
		case []byte:
			return av == string(bv)
		}
		return false
	case []byte:
		switch bv := b.(type) {
		case string:
			return string(av) == bv
		case []byte:
			return bytes.Equal(av, bv)
		}
		return false
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	case nil:
		return b == nil
	case time.Time:
		bv, ok := b.(time.Time)
		return ok && av.Equal(bv)
	}
	if _, isStr := b.(string); !isStr {
		if af, ok := asFloat(a); ok {
			bf, ok := asFloat(b)
			return ok && af == bf
		}
	}
	return reflect.DeepEqual(a, b)
}

func tablesEqual(a, b Table) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok || !deepValueEqual(av, bv) {
			return false
		}
	}
	return true
}

func deepValueEqual(a, b any) bool {
	if at, ok := asTable(a); ok {
		bt, ok := asTable(b)
		return ok && tablesEqual(at, bt)
	}
	if al, ok := a.([]any); ok {
		bl, ok := b.([]any)
		if !ok || len(al) != len(bl) {
			return false
		}
		for i := range al {
			if !deepValueEqual(al[i], bl[i]) {
				return false
			}
		}
		return true
	}
	return valuesEqual(a, b)
}

// asTable accepts map[string]any and any named map type built on it.
func asTable(v any) (Table, bool) {
	if t, ok := v.(map[string]any); ok {
		return t, true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Map && rv.Type().ConvertibleTo(reflect.TypeOf(Table(nil))) {
		return rv.Convert(reflect.TypeOf(Table(nil))).Interface().(map[string]any), true
	}
	return nil, false
}
