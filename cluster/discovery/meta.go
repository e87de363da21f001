package discovery

import (
	"encoding/binary"
	"errors"
	"sort"
)

// errBadMeta is returned for metadata bytes that do not decode.
var errBadMeta = errors.New("discovery: bad metadata encoding")

// encodeMeta encodes m as uvarint(count) then, sorted by key, each key and
// value as uvarint(len) bytes. Sorting makes equal maps equal bytes, so
// memberlist's "metadata changed" check is exact.
func encodeMeta(m map[string]string) []byte {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := binary.AppendUvarint(nil, uint64(len(keys)))
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(m[k])))
		b = append(b, m[k]...)
	}
	return b
}

// decodeMeta is encodeMeta's inverse; empty input is an empty map.
func decodeMeta(b []byte) (map[string]string, error) {
	m := map[string]string{}
	if len(b) == 0 {
		return m, nil
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errBadMeta
	}
	b = b[k:]
	str := func() (string, bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(l)])
		b = b[k+int(l):]
		return s, true
	}
	for range n {
		key, ok := str()
		if !ok {
			return nil, errBadMeta
		}
		val, ok := str()
		if !ok {
			return nil, errBadMeta
		}
		m[key] = val
	}
	if len(b) != 0 {
		return nil, errBadMeta
	}
	return m, nil
}
