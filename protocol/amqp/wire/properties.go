package wire

import (
	"encoding/binary"
	"time"
)

// Property flags: which Properties a content header carries. The bits are
// those of the basic class in the specification.
const (
	FlagContentType     uint16 = 0x8000
	FlagContentEncoding uint16 = 0x4000
	FlagHeaders         uint16 = 0x2000
	FlagDeliveryMode    uint16 = 0x1000
	FlagPriority        uint16 = 0x0800
	FlagCorrelationID   uint16 = 0x0400
	FlagReplyTo         uint16 = 0x0200
	FlagExpiration      uint16 = 0x0100
	FlagMessageID       uint16 = 0x0080
	FlagTimestamp       uint16 = 0x0040
	FlagType            uint16 = 0x0020
	FlagUserID          uint16 = 0x0010
	FlagAppID           uint16 = 0x0008
	FlagClusterID       uint16 = 0x0004

	// flagContinuation announces a further flags word, which no property of
	// the basic class needs.
	flagContinuation uint16 = 0x0001
	// flagsKnown are all property bits.
	flagsKnown uint16 = 0xfffc
)

// Properties are the basic-class message properties of a content header.
// Flags tells which were present when decoding and selects which are
// written when encoding; an encoder given Flags == 0 writes the non-zero
// fields.
type Properties struct {
	Flags           uint16
	ContentType     string
	ContentEncoding string
	Headers         Table
	DeliveryMode    uint8 // 1 transient, 2 persistent
	Priority        uint8
	CorrelationID   string
	ReplyTo         string
	Expiration      string
	MessageID       string
	Timestamp       time.Time // whole seconds, UTC when decoded
	Type            string
	UserID          string
	AppID           string
	ClusterID       string // reserved by the specification
}

// Present returns the flags of the non-zero fields (Flags itself ignored).
func (p *Properties) Present() uint16 {
	var f uint16
	set := func(ok bool, bit uint16) {
		if ok {
			f |= bit
		}
	}
	set(p.ContentType != "", FlagContentType)
	set(p.ContentEncoding != "", FlagContentEncoding)
	set(len(p.Headers) != 0, FlagHeaders)
	set(p.DeliveryMode != 0, FlagDeliveryMode)
	set(p.Priority != 0, FlagPriority)
	set(p.CorrelationID != "", FlagCorrelationID)
	set(p.ReplyTo != "", FlagReplyTo)
	set(p.Expiration != "", FlagExpiration)
	set(p.MessageID != "", FlagMessageID)
	set(!p.Timestamp.IsZero(), FlagTimestamp)
	set(p.Type != "", FlagType)
	set(p.UserID != "", FlagUserID)
	set(p.AppID != "", FlagAppID)
	set(p.ClusterID != "", FlagClusterID)
	return f
}

// DecodeContentHeader decodes a content header frame payload: class id,
// weight (ignored), body size, property flags and properties. Strings and
// tables are copied: the result does not alias payload. It fails with a
// connection-scope SyntaxError *Error.
func DecodeContentHeader(payload []byte) (classID uint16, bodySize uint64, p Properties, err error) {
	d := decoder{b: payload}
	classID = d.short()
	d.short() // weight
	bodySize = d.longlong()
	flags := d.short()
	if d.err == nil && flags&flagContinuation != 0 {
		d.fail("content header property flags 0x%04x continue into a second word", flags)
	}
	p.Flags = flags & flagsKnown
	d.properties(&p)
	if err = d.finish(); err != nil {
		if e, ok := err.(*Error); ok {
			e.ClassID = classID
			e.Text = truncate(e.Text + " in content header")
		}
		return classID, 0, Properties{}, err
	}
	return classID, bodySize, p, nil
}

func (d *decoder) properties(p *Properties) {
	f := p.Flags
	if f&FlagContentType != 0 {
		p.ContentType = d.shortstr()
	}
	if f&FlagContentEncoding != 0 {
		p.ContentEncoding = d.shortstr()
	}
	if f&FlagHeaders != 0 {
		p.Headers = d.table()
	}
	if f&FlagDeliveryMode != 0 {
		p.DeliveryMode = d.octet()
	}
	if f&FlagPriority != 0 {
		p.Priority = d.octet()
	}
	if f&FlagCorrelationID != 0 {
		p.CorrelationID = d.shortstr()
	}
	if f&FlagReplyTo != 0 {
		p.ReplyTo = d.shortstr()
	}
	if f&FlagExpiration != 0 {
		p.Expiration = d.shortstr()
	}
	if f&FlagMessageID != 0 {
		p.MessageID = d.shortstr()
	}
	if f&FlagTimestamp != 0 {
		p.Timestamp = d.timestamp()
	}
	if f&FlagType != 0 {
		p.Type = d.shortstr()
	}
	if f&FlagUserID != 0 {
		p.UserID = d.shortstr()
	}
	if f&FlagAppID != 0 {
		p.AppID = d.shortstr()
	}
	if f&FlagClusterID != 0 {
		p.ClusterID = d.shortstr()
	}
}

// AppendContentHeader appends a content header frame payload. When
// p.Flags is 0 the flags are derived from p's non-zero fields; otherwise
// exactly the flagged properties are written. p may be nil (no properties).
func AppendContentHeader(b []byte, classID uint16, bodySize uint64, p *Properties) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, classID)
	b = append(b, 0, 0) // weight
	b = binary.BigEndian.AppendUint64(b, bodySize)
	if p == nil {
		return append(b, 0, 0), nil
	}
	f := p.Flags & flagsKnown
	if f == 0 {
		f = p.Present()
	}
	e := encoder{b: binary.BigEndian.AppendUint16(b, f)}
	if f&FlagContentType != 0 {
		e.shortstr(p.ContentType)
	}
	if f&FlagContentEncoding != 0 {
		e.shortstr(p.ContentEncoding)
	}
	if f&FlagHeaders != 0 {
		e.table(p.Headers)
	}
	if f&FlagDeliveryMode != 0 {
		e.octet(p.DeliveryMode)
	}
	if f&FlagPriority != 0 {
		e.octet(p.Priority)
	}
	if f&FlagCorrelationID != 0 {
		e.shortstr(p.CorrelationID)
	}
	if f&FlagReplyTo != 0 {
		e.shortstr(p.ReplyTo)
	}
	if f&FlagExpiration != 0 {
		e.shortstr(p.Expiration)
	}
	if f&FlagMessageID != 0 {
		e.shortstr(p.MessageID)
	}
	if f&FlagTimestamp != 0 {
		e.timestamp(p.Timestamp)
	}
	if f&FlagType != 0 {
		e.shortstr(p.Type)
	}
	if f&FlagUserID != 0 {
		e.shortstr(p.UserID)
	}
	if f&FlagAppID != 0 {
		e.shortstr(p.AppID)
	}
	if f&FlagClusterID != 0 {
		e.shortstr(p.ClusterID)
	}
	return e.b, e.err
}
