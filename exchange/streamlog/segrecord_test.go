package streamlog

import (
	"errors"
	"testing"
)

// FuzzSegmentRecord: a segment record round-trips; any bytes decode to a
// segment or ErrBadSegment, never a panic.
func FuzzSegmentRecord(f *testing.F) {
	f.Add(encodeSegment(1, 0))
	f.Add(encodeSegment(1<<61|5, 1<<40))
	f.Add(encodeRecord(map[string]any{"v": uint64(2), "id": uint64(1), "first": uint64(0)}))
	f.Add(encodeRecord(map[string]any{"id": uint64(1)}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, first, err := decodeSegment(b)
		if err != nil {
			if !errors.Is(err, ErrBadSegment) {
				t.Fatalf("error %v is not ErrBadSegment", err)
			}
			return
		}
		id2, first2, err := decodeSegment(encodeSegment(id, first))
		if err != nil || id2 != id || first2 != first {
			t.Fatalf("round trip of %d/%d: %d/%d %v", id, first, id2, first2, err)
		}
	})
}
