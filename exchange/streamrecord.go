package exchange

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/trident-broker/trident/exchange/headers"
)

// A stream's consumer that only re-encodes what it reads into its own
// protocol (the stream protocol: ConsumeOpts.StoredRuns, streamrun.go)
// takes the messages as their stored records and reads each in place
// (ViewStoredMessage), rather than having the core decode it into a
// Message: no string, table or body is copied per message, and nothing is
// allocated.
//
// The record's bytes are immutable: they are what the stream's log read
// (streamlog.Log.Read), either a chunk of its read cache, which its
// readers share and nobody writes, or a copy the store made for this read
// (Store.ReadMessages: "fn may keep data"). A run may hold them as long as
// it likes; it keeps that chunk's memory alive meanwhile, as the cursor's
// read-ahead does.

// StoredMessage is a stored message record read in place: its byte fields
// alias the record. The fields are those of Message and Properties, as
// decodeMessage would set them.
type StoredMessage struct {
	Exchange, RoutingKey         []byte
	ContentType, ContentEncoding []byte
	// headers is the encoded header table, nil if the message has none
	// (Headers walks it).
	headers                []byte
	DeliveryMode, Priority uint8
	CorrelationID, ReplyTo []byte
	Expiration, MessageID  []byte
	Timestamp              time.Time
	Type, UserID, AppID    []byte
	Body                   []byte
	EnqueuedAt, ExpiresAt  int64 // unix ns, as Message.ts and expiresAt
}

// HasHeaders reports whether the message has a header table (possibly
// empty), as Properties.Headers != nil does.
func (m *StoredMessage) HasHeaders() bool { return m.headers != nil }

// Headers walks the header table, in ascending key order, each key once.
func (m *StoredMessage) Headers() headers.Entries {
	return headers.NewEntries(m.headers, headers.Stored)
}

// ViewStoredMessage reads a stream's stored record (RecordRun.Recs). It
// refuses what decodeMessage refuses, and a record whose header keys do
// not ascend (DecodeStoredMessage reads those: a front end tries it when
// the view refuses).
func ViewStoredMessage(rec []byte) (StoredMessage, error) {
	var v StoredMessage
	err := ViewStoredMessageTo(&v, rec)
	return v, err
}

// ViewStoredMessageTo is ViewStoredMessage into v (every field set): a
// reader of many records keeps one StoredMessage rather than copying one
// out per record.
func ViewStoredMessageTo(v *StoredMessage, rec []byte) error {
	sorted, err := viewMessage(v, rec)
	if err == nil && !sorted {
		*v = StoredMessage{}
		return errUnsorted
	}
	return err
}

var errUnsorted = fmt.Errorf("%w: header keys out of order", errCorrupt)

// viewMessage reads rec in place, checking it as decodeMessage does;
// sorted reports whether its header keys ascend strictly (each once), as
// encodeMessage writes them: a view of a record that holds a key twice
// would not say which value decodeMessage keeps.
//
// It is on every message's path of the stream protocol's readers (the
// front end reads each record once; the core does not): it reads rec with a
// local offset and one-byte lengths inline rather than through a
// headers.Decoder's calls; FuzzViewStoredMessage holds it to
// decodeMessage's checks.
func viewMessage(v *StoredMessage, rec []byte) (sorted bool, err error) {
	*v = StoredMessage{}
	r := reader{b: rec}
	switch r.byte() {
	case 1:
	case 2: // a stream record's producer (decodeMessage)
		r.raw()
		r.uvarint()
		r.raw()
	default:
		return false, errCorrupt
	}
	r.raws(&v.Exchange, &v.RoutingKey)
	v.EnqueuedAt = r.varint()
	v.ExpiresAt = r.varint()
	// headers.Decoder.Properties, in place.
	r.raws(&v.ContentType, &v.ContentEncoding)
	sorted = true
	if r.bool() {
		d := headers.Decoder{B: r.b[r.i:], Format: headers.Stored}
		sorted = d.SkipTable()
		if d.Err != nil {
			*v = StoredMessage{}
			return false, fmt.Errorf("%w: %v", errCorrupt, d.Err)
		}
		v.headers = r.b[r.i : len(r.b)-len(d.B)]
		r.i = len(r.b) - len(d.B)
	}
	v.DeliveryMode = r.byte()
	v.Priority = r.byte()
	r.raws(&v.CorrelationID, &v.ReplyTo, &v.Expiration, &v.MessageID)
	if r.bool() {
		v.Timestamp = time.Unix(r.varint(), 0).UTC()
	}
	r.raws(&v.Type, &v.UserID, &v.AppID, &v.Body)
	if r.bad {
		*v = StoredMessage{}
		return false, errCorrupt
	}
	return sorted, nil
}

// reader reads a record as headers.Decoder does (same checks), from a
// local offset; bad is set by the first failure, after which every read
// returns zero.
type reader struct {
	b   []byte
	i   int
	bad bool
}

func (r *reader) byte() byte {
	if r.i >= len(r.b) {
		r.bad, r.i = true, len(r.b)
		return 0
	}
	c := r.b[r.i]
	r.i++
	return c
}

func (r *reader) bool() bool {
	switch r.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	r.bad, r.i = true, len(r.b)
	return false
}

func (r *reader) uvarint() uint64 {
	if r.i < len(r.b) && r.b[r.i] < 0x80 {
		r.i++
		return uint64(r.b[r.i-1])
	}
	v, n := binary.Uvarint(r.b[r.i:])
	if n <= 0 {
		r.bad, r.i = true, len(r.b)
		return 0
	}
	r.i += n
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b[r.i:])
	if n <= 0 {
		r.bad, r.i = true, len(r.b)
		return 0
	}
	r.i += n
	return v
}

// raws reads fields of raw in a row, a one-byte length (below 128) that
// is there in the loop, without a call: most of a record's fields.
func (r *reader) raws(fs ...*[]byte) {
	for _, f := range fs {
		if i := r.i; i < len(r.b) {
			if n := int(r.b[i]); n < 0x80 && n < len(r.b)-i {
				r.i = i + 1 + n
				*f = r.b[i+1 : r.i : r.i]
				continue
			}
		}
		*f = r.raw()
	}
}

// raw reads a length and that many bytes, aliasing b.
func (r *reader) raw() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)-r.i) {
		r.bad, r.i = true, len(r.b)
		return nil
	}
	p := r.b[r.i : r.i+int(n) : r.i+int(n)]
	r.i += int(n)
	return p
}

// DecodeStoredMessage decodes a stream delivery's record the core encoded
// into the Message a consumer without StoredRuns gets (a front end that
// needs one; the equivalence tests of a front end's in-place reading). It
// refuses a record kept as published (version 4): StoredAMQP10 gives
// those, and only the node's codec decodes them.
func DecodeStoredMessage(rec []byte) (*Message, error) {
	m, _, err := decodeMessage(rec)
	return m, err
}
