package streamlog

import (
	"errors"
	"fmt"

	"github.com/trident-broker/trident/exchange/headers"
)

// ErrBadSegment is a segment record that does not decode.
var ErrBadSegment = errors.New("exchange: bad stream segment record")

// encodeSegment and decodeSegment are a segment record: a versioned
// table {"v": 1, "id": store id, "first": first offset}; version 2 is a
// segment of chunk records (chunk.go), which an older build refuses
// rather than misreading. A record of another version, or without its
// fields, stops the start (ErrBadSegment) rather than losing the segment.
func encodeSegment(id, first uint64) []byte {
	return encodeRecord(map[string]any{"v": uint64(1), "id": id, "first": first})
}

// segmentVersion is the version a segment record is written with.
func segmentVersion(chunked bool) uint64 {
	if chunked {
		return 2
	}
	return 1
}

// segmentChunked reports whether a segment record (that decodes) is of
// version 2.
func segmentChunked(b []byte) bool {
	r, err := decodeRecord(b)
	if err != nil {
		return false
	}
	v, _ := r["v"].(uint64)
	return v == 2
}

func decodeSegment(b []byte) (id, first uint64, err error) {
	r, err := decodeRecord(b)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrBadSegment, err)
	}
	v, okV := r["v"].(uint64)
	id, okID := r["id"].(uint64)
	first, okF := r["first"].(uint64)
	if !okV || (v != 1 && v != 2) || !okID || !okF {
		return 0, 0, ErrBadSegment
	}
	return id, first, nil
}

// errCorrupt is a record that does not decode (the text is the core's
// record codec's, exchange/codec.go, whose tables these are).
var errCorrupt = errors.New("exchange: corrupt record")

// encodeRecord and decodeRecord are a metadata record as a table, in the
// headers package's Stored format (as the core's records).
func encodeRecord(t map[string]any) []byte {
	e := headers.Encoder{Format: headers.Stored}
	e.Table(t)
	return e.B
}

func decodeRecord(b []byte) (map[string]any, error) {
	d := headers.Decoder{B: b, Format: headers.Stored}
	t := d.Table()
	if d.Err != nil {
		return t, fmt.Errorf("%w: %v", errCorrupt, d.Err)
	}
	return t, nil
}
