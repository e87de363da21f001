package streamlog

import (
	"errors"
	"fmt"

	"github.com/trident-broker/trident/exchange/headers"
)

// The log's tests write message records of their own: the layout of the
// core's (exchange/codec.go) where the log looks at it (a version byte, 2
// followed by the producer, DecodeWriter's), then the enqueue time and
// the body. testTime is the log's TimeOf for them.

// testRecord is a message record of producer w (nil: none), enqueued at
// ts, with body.
func testRecord(w *Writer, ts int64, body []byte) []byte {
	e := headers.Encoder{Format: headers.Stored}
	if w != nil {
		e.B = append(e.B, 2)
		e.Str(w.Ref)
		e.Uvarint(w.Seq)
		e.Str(w.Filter)
	} else {
		e.B = append(e.B, 1)
	}
	e.Varint(ts)
	e.Bytes(body)
	return e.B
}

var errBadTestRecord = errors.New("not a test record")

// decodeTestRecord returns a test record's body and time.
func decodeTestRecord(data []byte) (body []byte, ts int64, err error) {
	d := headers.Decoder{B: data, Format: headers.Stored}
	switch d.Byte() {
	case 1:
	case 2:
		d.Raw(d.Uvarint())
		d.Uvarint()
		d.Raw(d.Uvarint())
	default:
		return nil, 0, errBadTestRecord
	}
	ts = d.Varint()
	body = d.Raw(d.Uvarint())
	if d.Err != nil {
		return nil, 0, fmt.Errorf("%w: %v", errBadTestRecord, d.Err)
	}
	return body, ts, nil
}

func testTime(data []byte) (int64, bool) {
	_, ts, err := decodeTestRecord(data)
	return ts, err == nil
}

// testBatch is a run of publishes, as exchange.Batch: Flush writes what
// registered.
type testBatch struct{ fs []Flusher }

func (b *testBatch) Defer(f Flusher) bool {
	if len(b.fs) >= 256 {
		return false
	}
	b.fs = append(b.fs, f)
	return true
}

func (b *testBatch) Flush() {
	for _, f := range b.fs {
		f.Flush()
	}
	b.fs = nil
}

func (b *testBatch) Active() bool { return len(b.fs) > 0 }

// batchOf is b as the log takes it (nil: no batch).
func batchOf(b *testBatch) Batch {
	if b == nil {
		return nil
	}
	return b
}

var errLost = errors.New("leadership lost")
