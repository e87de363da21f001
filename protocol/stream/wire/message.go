package wire

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// The stream clients publish and read AMQP 1.0 messages (the bare message
// of AMQP 1.0 part 3: sections, each a described value). Message keeps the
// sections Trident maps onto its own message: header (durable, priority),
// message annotations, properties, application properties and the body
// (data sections, or an amqp-value that is a string or binary). Delivery
// annotations, footers, sequence bodies and other value bodies are not
// kept.

// Section descriptors.
const (
	secHeader      = 0x70
	secDeliveryAnn = 0x71
	secMessageAnn  = 0x72
	secProperties  = 0x73
	secAppProps    = 0x74
	secData        = 0x75
	secSequence    = 0x76
	secValue       = 0x77
	secFooter      = 0x78
)

// ErrBadMessage is an AMQP 1.0 message that does not decode.
var ErrBadMessage = errors.New("wire: bad AMQP 1.0 message")

// maxDepth bounds nested lists, maps and arrays.
const maxDepth = 16

// Message is an AMQP 1.0 message as Trident keeps it. Times are unix ms,
// 0 absent.
type Message struct {
	Durable         bool
	Priority        uint8
	MessageID       string
	UserID          []byte
	To              string
	Subject         string
	ReplyTo         string
	CorrelationID   string
	ContentType     string
	ContentEncoding string
	AbsoluteExpiry  int64
	CreationTime    int64
	GroupID         string
	GroupSequence   uint32
	ReplyToGroupID  string
	// Annotations are the message annotations (symbol keys), AppProps
	// the application properties; values as decodeValue returns them.
	Annotations []Prop
	AppProps    []Prop
	Body        []byte
}

// Prop is a key and an AMQP 1.0 value: nil, bool, int8..int64,
// uint8..uint64, float32, float64, string, []byte, time.Time; a symbol is
// a string, a uuid its canonical string, a char an int32, lists, maps and
// arrays their printed form.
type Prop struct {
	Key   string
	Value any
}

// DecodeMessage decodes an AMQP 1.0 message. Body aliases b.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	d := &dec{b: b}
	bodySeen := false
	for len(d.b) > 0 {
		if d.u8() != 0 {
			return m, fmt.Errorf("%w: a section is not a described value", ErrBadMessage)
		}
		desc, err := readValue(d, 0)
		if err != nil {
			return m, err
		}
		code, ok := desc.(uint64)
		if !ok {
			return m, fmt.Errorf("%w: section descriptor %v", ErrBadMessage, desc)
		}
		switch code {
		case secData:
			p, err := readBinary(d)
			if err != nil {
				return m, err
			}
			if !bodySeen {
				m.Body = p
			} else {
				m.Body = append(m.Body[:len(m.Body):len(m.Body)], p...)
			}
			bodySeen = true
		case secValue:
			v, err := readValue(d, 0)
			if err != nil {
				return m, err
			}
			switch x := v.(type) {
			case string:
				m.Body = []byte(x)
			case []byte:
				m.Body = x
			}
			bodySeen = true
		case secHeader, secProperties:
			l, err := readList(d)
			if err != nil {
				return m, err
			}
			if code == secHeader {
				m.header(l)
			} else {
				m.properties(l)
			}
		case secMessageAnn, secAppProps:
			ps, err := readMap(d)
			if err != nil {
				return m, err
			}
			if code == secMessageAnn {
				m.Annotations = ps
			} else {
				m.AppProps = ps
			}
		case secDeliveryAnn, secSequence, secFooter:
			if _, err := readValue(d, 0); err != nil {
				return m, err
			}
		default:
			return m, fmt.Errorf("%w: unknown section %#x", ErrBadMessage, code)
		}
	}
	return m, nil
}

func (m *Message) header(l []any) {
	if len(l) > 0 {
		m.Durable, _ = l[0].(bool)
	}
	if len(l) > 1 {
		m.Priority, _ = l[1].(uint8)
	}
}

func (m *Message) properties(l []any) {
	str := func(i int) string {
		if i >= len(l) || l[i] == nil {
			return ""
		}
		switch v := l[i].(type) {
		case string:
			return v
		case []byte:
			return string(v)
		}
		return fmt.Sprint(l[i])
	}
	ms := func(i int) int64 {
		if i < len(l) {
			if t, ok := l[i].(time.Time); ok {
				return t.UnixMilli()
			}
		}
		return 0
	}
	m.MessageID = str(0)
	if len(l) > 1 {
		m.UserID, _ = l[1].([]byte)
	}
	m.To, m.Subject, m.ReplyTo, m.CorrelationID = str(2), str(3), str(4), str(5)
	m.ContentType, m.ContentEncoding = str(6), str(7)
	m.AbsoluteExpiry, m.CreationTime = ms(8), ms(9)
	m.GroupID = str(10)
	if len(l) > 11 {
		m.GroupSequence, _ = l[11].(uint32)
	}
	m.ReplyToGroupID = str(12)
}

func readBinary(d *dec) ([]byte, error) {
	c := d.u8()
	var n uint32
	switch c {
	case 0xa0:
		n = uint32(d.u8())
	case 0xb0:
		n = d.u32()
	default:
		return nil, fmt.Errorf("%w: data section of type %#x", ErrBadMessage, c)
	}
	if d.err != nil || uint32(len(d.b)) < n {
		return nil, ErrBadMessage
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p, nil
}

func readList(d *dec) ([]any, error) {
	v, err := readValue(d, 0)
	if err != nil {
		return nil, err
	}
	switch l := v.(type) {
	case []any:
		return l, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("%w: a list was expected", ErrBadMessage)
}

func readMap(d *dec) ([]Prop, error) {
	c := d.u8()
	var size, count uint32
	switch c {
	case 0x40:
		return nil, nil
	case 0xc1:
		size, count = uint32(d.u8()), uint32(d.u8())
		size--
	case 0xd1:
		size, count = d.u32(), d.u32()
		size -= 4
	default:
		return nil, fmt.Errorf("%w: a map was expected, got type %#x", ErrBadMessage, c)
	}
	if d.err != nil || count%2 != 0 || uint64(size) > uint64(len(d.b)) || count > size {
		return nil, ErrBadMessage
	}
	out := make([]Prop, 0, count/2)
	for i := uint32(0); i < count; i += 2 {
		k, err := readValue(d, 1)
		if err != nil {
			return nil, err
		}
		v, err := readValue(d, 1)
		if err != nil {
			return nil, err
		}
		out = append(out, Prop{Key: printValue(k), Value: v})
	}
	return out, nil
}

// readValue reads one AMQP 1.0 value.
func readValue(d *dec, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nested too deep", ErrBadMessage)
	}
	c := d.u8()
	if d.err != nil {
		return nil, ErrBadMessage
	}
	if c == 0 { // described: keep the value, drop the descriptor
		if _, err := readValue(d, depth+1); err != nil {
			return nil, err
		}
		return readValue(d, depth+1)
	}
	return readTyped(d, c, depth)
}

func readTyped(d *dec, c byte, depth int) (any, error) {
	var v any
	switch c {
	case 0x40:
		v = nil
	case 0x41:
		v = true
	case 0x42:
		v = false
	case 0x43:
		v = uint32(0)
	case 0x44:
		v = uint64(0)
	case 0x45:
		v = []any{}
	case 0x50:
		v = d.u8()
	case 0x51:
		v = int8(d.u8())
	case 0x52:
		v = uint32(d.u8())
	case 0x53:
		v = uint64(d.u8())
	case 0x54:
		v = int32(int8(d.u8()))
	case 0x55:
		v = int64(int8(d.u8()))
	case 0x56:
		v = d.u8() != 0
	case 0x60:
		v = d.u16()
	case 0x61:
		v = int16(d.u16())
	case 0x70:
		v = d.u32()
	case 0x71:
		v = int32(d.u32())
	case 0x72:
		v = math.Float32frombits(d.u32())
	case 0x73:
		v = int32(d.u32())
	case 0x74:
		v = "decimal32:" + strconv.FormatUint(uint64(d.u32()), 16)
	case 0x80:
		v = d.u64()
	case 0x81:
		v = int64(d.u64())
	case 0x82:
		v = math.Float64frombits(d.u64())
	case 0x83:
		v = time.UnixMilli(int64(d.u64())).UTC()
	case 0x84:
		v = "decimal64:" + strconv.FormatUint(d.u64(), 16)
	case 0x94, 0x98:
		if len(d.b) < 16 {
			return nil, ErrBadMessage
		}
		u := d.b[:16]
		d.b = d.b[16:]
		if c == 0x98 {
			h := hex.EncodeToString(u)
			v = h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
		} else {
			v = "decimal128:" + hex.EncodeToString(u)
		}
	case 0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3:
		var n uint32
		if c < 0xb0 {
			n = uint32(d.u8())
		} else {
			n = d.u32()
		}
		if d.err != nil || uint32(len(d.b)) < n {
			return nil, ErrBadMessage
		}
		p := d.b[:n:n]
		d.b = d.b[n:]
		if c == 0xa0 || c == 0xb0 {
			v = p
		} else {
			v = string(p)
		}
	case 0xc0, 0xc1, 0xd0, 0xd1:
		var size, count uint32
		if c < 0xd0 {
			size, count = uint32(d.u8()), uint32(d.u8())
			if size > 0 {
				size--
			}
		} else {
			size, count = d.u32(), d.u32()
			if size >= 4 {
				size -= 4
			}
		}
		if d.err != nil || uint64(size) > uint64(len(d.b)) || count > size {
			return nil, ErrBadMessage
		}
		l := make([]any, 0, count)
		for i := uint32(0); i < count; i++ {
			x, err := readValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, x)
		}
		if c == 0xc1 || c == 0xd1 {
			return printValue(l), nil
		}
		v = l
	case 0xe0, 0xf0:
		var size, count uint32
		if c == 0xe0 {
			size, count = uint32(d.u8()), uint32(d.u8())
		} else {
			size, count = d.u32(), d.u32()
		}
		if d.err != nil || uint64(size) > uint64(len(d.b))+4 || count > size {
			return nil, ErrBadMessage
		}
		ec := d.u8()
		if ec == 0 {
			return nil, fmt.Errorf("%w: described array elements", ErrBadMessage)
		}
		l := make([]any, 0, min(count, 1024))
		for i := uint32(0); i < count; i++ {
			x, err := readTyped(d, ec, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, x)
		}
		v = printValue(l)
	default:
		return nil, fmt.Errorf("%w: unknown type %#x", ErrBadMessage, c)
	}
	if d.err != nil {
		return nil, ErrBadMessage
	}
	return v, nil
}

func printValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return fmt.Sprint(v)
}

// --- encoding ---

func appendString[S ~string | ~[]byte](b []byte, s S, sym bool) []byte {
	c8, c32 := byte(0xa1), byte(0xb1)
	if sym {
		c8, c32 = 0xa3, 0xb3
	}
	if len(s) < 256 {
		return append(append(b, c8, byte(len(s))), s...)
	}
	return append(be32(append(b, c32), uint32(len(s))), s...)
}

func appendBinary(b []byte, p []byte) []byte {
	if len(p) < 256 {
		return append(append(b, 0xa0, byte(len(p))), p...)
	}
	return append(be32(append(b, 0xb0), uint32(len(p))), p...)
}

// appendValue encodes a property value; anything without an AMQP 1.0
// type of its own is sent as its printed form.
func appendValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, 0x40)
	case bool:
		return AppendBool(b, x)
	case int8:
		return AppendByte(b, x)
	case int16:
		return AppendShort(b, x)
	case int32:
		return AppendInt(b, x)
	case int64:
		return AppendLong(b, x)
	case int:
		return AppendLong(b, int64(x))
	case uint8:
		return AppendUbyte(b, x)
	case uint16:
		return AppendUshort(b, x)
	case uint32:
		return AppendUint(b, x)
	case uint64:
		return AppendUlong(b, x)
	case float32:
		return AppendFloat(b, math.Float32bits(x))
	case float64:
		return AppendDouble(b, math.Float64bits(x))
	case time.Time:
		return AppendTimestamp(b, x.UnixMilli())
	case string:
		return appendString(b, x, false)
	case []byte:
		return appendBinary(b, x)
	}
	return appendString(b, fmt.Sprint(v), false)
}

// beginCompound starts a list32 or map32 of count items; endCompound
// fills its size in.
func beginCompound(b []byte, code byte, count uint32) ([]byte, int) {
	b = append(b, code)
	at := len(b)
	return be32(be32(b, 0), count), at
}

func endCompound(b []byte, at int) []byte {
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

func appendSection(b []byte, code byte) []byte { return append(b, 0, 0x53, code) }

func appendProps(b []byte, code byte, ps []Prop, sym bool) []byte {
	if len(ps) == 0 {
		return b
	}
	b = appendSection(b, code)
	b, at := beginCompound(b, 0xd1, uint32(2*len(ps)))
	for _, p := range ps {
		b = appendValue(appendString(b, p.Key, sym), p.Value)
	}
	return endCompound(b, at)
}

// AppendMessage encodes m: a header when durable or with a priority,
// message annotations, properties when any is set, application
// properties, and the body as one data section.
func AppendMessage(b []byte, m *Message) []byte {
	b = AppendHeaderSection(b, m.Durable, m.Priority)
	b = appendProps(b, secMessageAnn, m.Annotations, true)
	b = appendProperties(b, &propFields[string]{messageID: m.MessageID, userID: m.UserID, to: m.To,
		subject: m.Subject, replyTo: m.ReplyTo, correlationID: m.CorrelationID, contentType: m.ContentType,
		contentEncoding: m.ContentEncoding, absoluteExpiry: m.AbsoluteExpiry, creationTime: m.CreationTime,
		groupID: m.GroupID, groupSequence: m.GroupSequence, replyToGroupID: m.ReplyToGroupID})
	return appendData(appendProps(b, secAppProps, m.AppProps, false), m.Body)
}

func appendData(b []byte, body []byte) []byte {
	return appendBinary(appendSection(b, secData), body)
}

// AppendHeaderSection appends the header section AppendMessage writes: a
// list of durable and priority, nothing when neither is set.
func AppendHeaderSection(b []byte, durable bool, priority uint8) []byte {
	if !durable && priority == 0 {
		return b
	}
	b = appendSection(b, secHeader)
	b = append(b, 0xc0, 3, 2)
	if durable {
		b = append(b, 0x41)
	} else {
		b = append(b, 0x42)
	}
	return append(b, 0x50, priority)
}

// propFields are the properties section's fields (Message's), with its
// strings as strings (AppendMessage) or as bytes (PropertyBytes).
type propFields[S ~string | ~[]byte] struct {
	messageID                           S
	userID                              []byte
	to, subject, replyTo, correlationID S
	contentType, contentEncoding        S
	absoluteExpiry, creationTime        int64
	groupID                             S
	groupSequence                       uint32
	replyToGroupID                      S
}

// appendProperties appends the properties section when a field is set:
// a list up to the last field set, the fields not set before it null.
func appendProperties[S ~string | ~[]byte](b []byte, f *propFields[S]) []byte {
	last := -1
	set := [13]bool{len(f.messageID) > 0, f.userID != nil, len(f.to) > 0, len(f.subject) > 0,
		len(f.replyTo) > 0, len(f.correlationID) > 0, len(f.contentType) > 0, len(f.contentEncoding) > 0,
		f.absoluteExpiry != 0, f.creationTime != 0, len(f.groupID) > 0, f.groupSequence != 0, len(f.replyToGroupID) > 0}
	for i, ok := range set {
		if ok {
			last = i
		}
	}
	if last < 0 {
		return b
	}
	b, at := beginCompound(appendSection(b, secProperties), 0xd0, uint32(last+1))
	for i, ok := range set[:last+1] {
		if !ok {
			b = append(b, 0x40)
			continue
		}
		switch i {
		case 0:
			b = appendString(b, f.messageID, false)
		case 1:
			b = appendBinary(b, f.userID)
		case 2:
			b = appendString(b, f.to, false)
		case 3:
			b = appendString(b, f.subject, false)
		case 4:
			b = appendString(b, f.replyTo, false)
		case 5:
			b = appendString(b, f.correlationID, false)
		case 6:
			b = appendString(b, f.contentType, true)
		case 7:
			b = appendString(b, f.contentEncoding, true)
		case 8:
			b = be64(append(b, 0x83), uint64(f.absoluteExpiry))
		case 9:
			b = be64(append(b, 0x83), uint64(f.creationTime))
		case 10:
			b = appendString(b, f.groupID, false)
		case 11:
			b = be32(append(b, 0x70), f.groupSequence)
		case 12:
			b = appendString(b, f.replyToGroupID, false)
		}
	}
	return endCompound(b, at)
}
