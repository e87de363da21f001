package wire

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// same is reflect.DeepEqual except that floats compare by bit pattern, so a
// decoded NaN equals itself.
func same(a, b any) bool {
	return sameValue(reflect.ValueOf(a), reflect.ValueOf(b))
}

func sameValue(a, b reflect.Value) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Float32:
		return math.Float32bits(float32(a.Float())) == math.Float32bits(float32(b.Float()))
	case reflect.Float64:
		return math.Float64bits(a.Float()) == math.Float64bits(b.Float())
	case reflect.Interface, reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !sameValue(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	case reflect.Struct:
		if a.Type() == reflect.TypeFor[time.Time]() {
			return a.Interface().(time.Time).Equal(b.Interface().(time.Time))
		}
		for i := range a.NumField() {
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// fill sets every field of the struct pointed to by v to a distinct
// non-zero value; bools are set to bools.
func fill(v any, bools bool) {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		name := rv.Type().Field(i).Name
		switch f.Kind() {
		case reflect.String:
			f.SetString(strings.ToLower(name) + "-value")
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n := uint64(0x0102030405060708) + uint64(i)
			f.SetUint(n & (1<<(8*f.Type().Size()) - 1))
		case reflect.Bool:
			f.SetBool(bools)
		case reflect.Map:
			f.Set(reflect.ValueOf(Table{"x-" + name: int32(i + 1), "nested": Table{"s": "v"}}))
		case reflect.Struct:
			f.Set(reflect.ValueOf(time.Unix(1700000000+int64(i), 0).UTC()))
		default:
			panic(fmt.Sprintf("fill: unhandled kind %s of %s", f.Kind(), name))
		}
	}
}

func mustHex(t testing.TB, b []byte) string {
	t.Helper()
	return fmt.Sprintf("% x", b)
}
