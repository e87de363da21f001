package exchange

import (
	"fmt"
	"time"

	"github.com/trident-broker/trident/exchange/headers"
)

// A stream's consumer that only re-encodes what it reads into its own
// protocol (the stream protocol: ConsumeOpts.StoredRecords) takes each
// message as its stored record and reads it in place, rather than having
// the core decode it into a Message: no string, table or body is copied
// per message, and nothing is allocated.
//
// The record's bytes are immutable: they are what the stream's log read
// (streamlog.Log.Read), either a chunk of its read cache, which its
// readers share and nobody writes, or a copy the store made for this read
// (Store.ReadMessages: "fn may keep data"). A delivery may hold them as
// long as it likes; it keeps that chunk's memory alive meanwhile, as the
// cursor's read-ahead does.

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

// ViewStoredMessage reads a stream delivery's record (Delivery.Record).
// It refuses what decodeMessage refuses, and a record whose header keys
// do not ascend (which the core delivers decoded, never as a record).
func ViewStoredMessage(rec []byte) (StoredMessage, error) {
	v, sorted, err := viewMessage(rec)
	if err == nil && !sorted {
		return StoredMessage{}, errUnsorted
	}
	return v, err
}

var errUnsorted = fmt.Errorf("%w: header keys out of order", errCorrupt)

// viewMessage reads rec in place, checking it as decodeMessage does;
// sorted reports whether its header keys ascend strictly (each once), as
// encodeMessage writes them: a view of a record that holds a key twice
// would not say which value decodeMessage keeps.
func viewMessage(rec []byte) (v StoredMessage, sorted bool, err error) {
	d := headers.Decoder{B: rec, Format: headers.Stored}
	switch d.Byte() {
	case 1:
	case 2: // a stream record's producer (decodeMessage)
		d.Raw(d.Uvarint())
		d.Uvarint()
		d.Raw(d.Uvarint())
	default:
		return v, false, errCorrupt
	}
	v.Exchange = d.Raw(d.Uvarint())
	v.RoutingKey = d.Raw(d.Uvarint())
	v.EnqueuedAt = d.Varint()
	v.ExpiresAt = d.Varint()
	// Decoder.Properties, in place.
	v.ContentType = d.Raw(d.Uvarint())
	v.ContentEncoding = d.Raw(d.Uvarint())
	sorted = true
	if d.Bool() {
		start := d.B
		sorted = d.SkipTable()
		if d.Err == nil {
			v.headers = start[:len(start)-len(d.B)]
		}
	}
	v.DeliveryMode = d.Byte()
	v.Priority = d.Byte()
	v.CorrelationID = d.Raw(d.Uvarint())
	v.ReplyTo = d.Raw(d.Uvarint())
	v.Expiration = d.Raw(d.Uvarint())
	v.MessageID = d.Raw(d.Uvarint())
	if d.Bool() {
		v.Timestamp = d.Time()
	}
	v.Type = d.Raw(d.Uvarint())
	v.UserID = d.Raw(d.Uvarint())
	v.AppID = d.Raw(d.Uvarint())
	v.Body = d.Raw(d.Uvarint())
	if err := corrupt(&d); err != nil {
		return StoredMessage{}, false, err
	}
	return v, sorted, nil
}

// DecodeStoredMessage decodes a stream delivery's record into the Message
// a consumer without StoredRecords gets (a front end that needs one; the
// equivalence tests of a front end's in-place reading).
func DecodeStoredMessage(rec []byte) (*Message, error) {
	m, _, err := decodeMessage(rec)
	return m, err
}
