package wire

import "encoding/binary"

// A message written part by part, for a caller that holds no Message (a
// stored record read in place, whose strings are bytes): the sections in
// AppendMessage's order, through the same code, so that the bytes are
// those AppendMessage writes for the same message:
//
//	b = AppendHeaderSection(b, durable, priority)
//	b, m := BeginMapSection(b, true) // message annotations
//	b = AppendLong(m.Key(b, key), v) // ... per entry
//	b = m.End(b)
//	b = AppendPropertiesSection(b, &PropertyBytes{...})
//	b, m = BeginMapSection(b, false) // application properties
//	...
//	b = AppendDataSection(b, body)

// PropertyBytes are the properties section's fields Trident's messages
// carry (Message's but user-id, group-sequence and reply-to-group-id),
// strings as bytes; empty is absent.
type PropertyBytes struct {
	MessageID, To, Subject, ReplyTo, CorrelationID []byte
	ContentType, ContentEncoding                   []byte
	AbsoluteExpiry, CreationTime                   int64 // unix ms, 0 absent
	GroupID                                        []byte
}

// AppendPropertiesSection appends the properties section, nothing when
// no field is set.
func AppendPropertiesSection(b []byte, p *PropertyBytes) []byte {
	return appendProperties(b, &propFields[[]byte]{messageID: p.MessageID, to: p.To, subject: p.Subject,
		replyTo: p.ReplyTo, correlationID: p.CorrelationID, contentType: p.ContentType,
		contentEncoding: p.ContentEncoding, absoluteExpiry: p.AbsoluteExpiry, creationTime: p.CreationTime,
		groupID: p.GroupID})
}

// MapSection is a message annotations or application properties section
// being written: Key before each value, End after the last.
type MapSection struct {
	start, at int
	n         uint32
	sym       bool
}

// BeginMapSection starts the message annotations (keys are symbols) or
// the application properties (keys are strings).
func BeginMapSection(b []byte, annotations bool) ([]byte, MapSection) {
	m := MapSection{start: len(b), sym: annotations}
	code := byte(secAppProps)
	if annotations {
		code = secMessageAnn
	}
	b, m.at = beginCompound(appendSection(b, code), 0xd1, 0)
	return b, m
}

// Key appends an entry's key; its value follows.
func (m *MapSection) Key(b []byte, k []byte) []byte {
	m.n++
	return appendString(b, k, m.sym)
}

// End completes the section, or takes it back if it has no entry (as
// AppendMessage writes none).
func (m *MapSection) End(b []byte) []byte {
	if m.n == 0 {
		return b[:m.start]
	}
	binary.BigEndian.PutUint32(b[m.at+4:], 2*m.n)
	return endCompound(b, m.at)
}

// AppendDataSection appends the body as one data section.
func AppendDataSection(b []byte, body []byte) []byte { return appendData(b, body) }

// Values, encoded as AppendMessage encodes the Go value of that type in
// a map (appendValue).

// AppendNull appends null (nil).
func AppendNull(b []byte) []byte { return append(b, 0x40) }

// AppendBool appends a boolean.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0x41)
	}
	return append(b, 0x42)
}

// AppendByte appends an int8.
func AppendByte(b []byte, v int8) []byte { return append(b, 0x51, byte(v)) }

// AppendUbyte appends a uint8.
func AppendUbyte(b []byte, v uint8) []byte { return append(b, 0x50, v) }

// AppendShort appends an int16.
func AppendShort(b []byte, v int16) []byte { return be16(append(b, 0x61), uint16(v)) }

// AppendUshort appends a uint16.
func AppendUshort(b []byte, v uint16) []byte { return be16(append(b, 0x60), v) }

// AppendInt appends an int32.
func AppendInt(b []byte, v int32) []byte { return be32(append(b, 0x71), uint32(v)) }

// AppendUint appends a uint32.
func AppendUint(b []byte, v uint32) []byte { return be32(append(b, 0x70), v) }

// AppendLong appends an int64.
func AppendLong(b []byte, v int64) []byte { return be64(append(b, 0x81), uint64(v)) }

// AppendUlong appends a uint64.
func AppendUlong(b []byte, v uint64) []byte { return be64(append(b, 0x80), v) }

// AppendFloat appends a float32 given by its IEEE 754 bits.
func AppendFloat(b []byte, bits uint32) []byte { return be32(append(b, 0x72), bits) }

// AppendDouble appends a float64 given by its IEEE 754 bits.
func AppendDouble(b []byte, bits uint64) []byte { return be64(append(b, 0x82), bits) }

// AppendTimestamp appends a timestamp (unix ms).
func AppendTimestamp(b []byte, ms int64) []byte { return be64(append(b, 0x83), uint64(ms)) }

// AppendString appends a string given by its bytes.
func AppendString(b []byte, s []byte) []byte { return appendString(b, s, false) }

// AppendBinary appends a byte string.
func AppendBinary(b []byte, p []byte) []byte { return appendBinary(b, p) }

// AppendValue appends any other value as AppendMessage does (its printed
// form if it has no AMQP 1.0 type).
func AppendValue(b []byte, v any) []byte { return appendValue(b, v) }
