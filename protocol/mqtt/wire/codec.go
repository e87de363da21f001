package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Packet is a decoded MQTT control packet (mochi-mqtt's single packet type).
type Packet = packets.Packet

// Errors returned by Read and Decode. Decode also returns the packets.Code
// errors of the body decoders (malformed packet, protocol violation), which
// carry an MQTT 5 reason code.
var (
	// ErrTooLarge: the packet's remaining length exceeds the limit.
	ErrTooLarge = errors.New("wire: packet exceeds maximum size")
	// ErrMalformed: the bytes are not an MQTT control packet.
	ErrMalformed = errors.New("wire: malformed packet")
)

// Header is a packet's fixed header.
type Header struct {
	First     byte // packet type and flags
	Remaining int  // length of the rest of the packet
}

// ReadHeader reads a fixed header. It rejects a remaining length over max
// (max <= 0: the MQTT limit of 268,435,455) before anything else is read.
func ReadHeader(r io.ByteReader, max int) (Header, error) {
	first, err := r.ReadByte()
	if err != nil {
		return Header{}, err
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Header{}, io.ErrUnexpectedEOF
		}
		return Header{}, ErrMalformed
	}
	if max > 0 && n > max {
		return Header{}, ErrTooLarge
	}
	return Header{First: first, Remaining: n}, nil
}

// ConnectVersion returns the protocol level of a CONNECT from the first
// bytes of its body (after the fixed header): 3, 4 or 5 for "MQIsdp"/3,
// "MQTT"/4 and "MQTT"/5, 0 when body is too short to tell or is not such a
// CONNECT. It reads no more than the protocol name and level (at most 9
// bytes), so a server can answer a CONNECT it will not read in its
// client's version.
func ConnectVersion(body []byte) byte {
	if len(body) < 2 {
		return 0
	}
	n := int(body[0])<<8 | int(body[1])
	if n != 4 && n != 6 || len(body) < 2+n+1 {
		return 0
	}
	name, level := string(body[2:2+n]), body[2+n]
	switch {
	case name == "MQTT" && (level == 4 || level == 5):
		return level
	case name == "MQIsdp" && level == 3:
		return 3
	}
	return 0
}

// Reader is what Read and ReadRaw read from (a *bufio.Reader, say).
type Reader interface {
	io.Reader
	io.ByteReader
}

// Read reads one packet from r: fixed header, then the body into a new
// buffer, then Decode. The packet's byte slices and strings (payload,
// topic, client id, ...) alias that buffer, which is never reused, so they
// may be kept.
func Read(r Reader, version byte, max int) (Packet, error) {
	pk, _, err := ReadRaw(r, version, max)
	return pk, err
}

// ReadRaw is Read that also returns the whole packet as it came, fixed
// header included, in the one buffer the packet's slices alias: a QoS 0
// MQTT 3 PUBLISH is then, but for its flags, already encoded for every
// MQTT 3 subscriber.
func ReadRaw(r Reader, version byte, max int) (Packet, []byte, error) {
	h, err := ReadHeader(r, max)
	if err != nil {
		return Packet{}, nil, err
	}
	return ReadBody(r, h, version, nil)
}

// ReadBody is ReadRaw after ReadHeader gave h: it reads the packet into
// buf (a new buffer if buf is too small, nil say), after the fixed header,
// and decodes it. A caller that passes a buffer of its own may reuse it
// only once nothing refers to the packet's slices and strings any more.
func ReadBody(r Reader, h Header, version byte, buf []byte) (Packet, []byte, error) {
	if cap(buf) < 5+h.Remaining {
		buf = make([]byte, 0, 5+h.Remaining)
	}
	raw := appendFixedHeader(buf[:0], h)
	n := len(raw)
	raw = raw[:n+h.Remaining]
	if _, err := io.ReadFull(r, raw[n:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Packet{}, nil, err
	}
	pk, err := Decode(h, raw[n:], version)
	if err != nil {
		return Packet{}, nil, err
	}
	return pk, raw, nil
}

// appendFixedHeader appends h as it is on the wire.
func appendFixedHeader(b []byte, h Header) []byte {
	return appendRemaining(append(b, h.First), h.Remaining)
}

// appendRemaining appends rem as MQTT's variable byte integer.
func appendRemaining(b []byte, rem int) []byte {
	for {
		d := byte(rem % 128)
		rem /= 128
		if rem > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if rem == 0 {
			return b
		}
	}
}

// PublishIDOffset is where the packet id of b, a whole PUBLISH with QoS
// > 0 as this package or mochi encodes it, starts: after the fixed header
// and the topic name. ok is false if b is too short to hold one.
func PublishIDOffset(b []byte) (off int, ok bool) {
	off = 1
	for off < len(b) && off < 5 && b[off]&0x80 != 0 {
		off++
	}
	off++
	if off+2 > len(b) {
		return 0, false
	}
	off += 2 + (int(b[off])<<8 | int(b[off+1]))
	if off+2 > len(b) {
		return 0, false
	}
	return off, true
}

// AppendAck appends a PUBACK, PUBREC, PUBREL or PUBCOMP (typ) for packet
// id pid. With v5 a reason code other than success is written; v3 has none.
func AppendAck(b []byte, typ byte, pid uint16, code byte, v5 bool) []byte {
	first := typ << 4
	if typ == packets.Pubrel {
		first |= 0x02
	}
	if v5 && code != 0 {
		return append(b, first, 3, byte(pid>>8), byte(pid), code)
	}
	return append(b, first, 2, byte(pid>>8), byte(pid))
}

// AppendPublishHeader appends an MQTT 3.1/3.1.1 PUBLISH up to its payload
// (fixed header, topic name, packet id when qos > 0) for a payload of
// payloadLen bytes; the payload follows it on the wire. It is the
// allocation-free encoding of the delivery path; MQTT 5 packets, with
// properties, go through packets.Packet.PublishEncode. The result is that
// of PublishEncode for the same packet.
func AppendPublishHeader(b []byte, topic string, qos byte, dup, retain bool, pid uint16, payloadLen int) []byte {
	first := byte(packets.Publish<<4) | qos<<1
	if dup {
		first |= 0x08
	}
	if retain {
		first |= 0x01
	}
	rem := 2 + len(topic) + payloadLen
	if qos > 0 {
		rem += 2
	}
	b = appendRemaining(append(b, first), rem)
	b = append(b, byte(len(topic)>>8), byte(len(topic)))
	b = append(b, topic...)
	if qos > 0 {
		b = append(b, byte(pid>>8), byte(pid))
	}
	return b
}

// Decode decodes a packet body. version is the protocol version of the
// connection (3, 4 or 5); for CONNECT it is read from the packet itself.
// It never panics.
func Decode(h Header, body []byte, version byte) (pk Packet, err error) {
	defer func() {
		if r := recover(); r != nil {
			pk, err = Packet{}, fmt.Errorf("%w: %v", ErrMalformed, r)
		}
	}()
	pk.ProtocolVersion = version
	if err := pk.FixedHeader.Decode(h.First); err != nil {
		return Packet{}, err
	}
	pk.FixedHeader.Remaining = h.Remaining
	if len(body) != h.Remaining {
		return Packet{}, ErrMalformed
	}
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectDecode(body)
	case packets.Publish:
		err = decodePublish(&pk, body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Pubrel:
		err = pk.PubrelDecode(body)
	case packets.Pubcomp:
		err = pk.PubcompDecode(body)
	case packets.Subscribe:
		err = pk.SubscribeDecode(body)
	case packets.Unsubscribe:
		err = pk.UnsubscribeDecode(body)
	case packets.Pingreq:
		if h.Remaining != 0 {
			err = ErrMalformed
		}
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
		if err == nil && version == 5 && len(body) == 1 {
			// mochi reads the reason code only when properties follow.
			pk.ReasonCode = body[0]
		}
	case packets.Auth:
		err = pk.AuthDecode(body)
	default:
		// CONNACK, SUBACK, UNSUBACK, PINGRESP and reserved types are
		// never sent by a client.
		err = fmt.Errorf("%w: packet type %d from a client", ErrMalformed, pk.FixedHeader.Type)
	}
	if err != nil {
		return Packet{}, err
	}
	return pk, nil
}

// decodePublish decodes a PUBLISH body. An MQTT 5 PUBLISH without
// properties (the property length a single 0) is decoded as MQTT 3's
// with that byte skipped: mochi's property decoder allocates a reader for
// every packet, even an empty list.
func decodePublish(pk *Packet, body []byte) error {
	if pk.ProtocolVersion != 5 {
		return pk.PublishDecode(body)
	}
	pk.ProtocolVersion = 4
	err := pk.PublishDecode(body)
	pk.ProtocolVersion = 5
	if err == nil && len(pk.Payload) > 0 && pk.Payload[0] == 0 {
		pk.Payload = pk.Payload[1:]
		return nil
	}
	pk.TopicName, pk.PacketID, pk.Payload = "", 0, nil
	return pk.PublishDecode(body)
}

// Encode appends the encoding of pk to buf. pk.ProtocolVersion selects the
// MQTT 5 form (properties, reason codes).
func Encode(buf *bytes.Buffer, pk *Packet) error {
	switch pk.FixedHeader.Type {
	case packets.Connect:
		return pk.ConnectEncode(buf)
	case packets.Connack:
		return pk.ConnackEncode(buf)
	case packets.Publish:
		return pk.PublishEncode(buf)
	case packets.Puback:
		return pk.PubackEncode(buf)
	case packets.Pubrec:
		return pk.PubrecEncode(buf)
	case packets.Pubrel:
		return pk.PubrelEncode(buf)
	case packets.Pubcomp:
		return pk.PubcompEncode(buf)
	case packets.Subscribe:
		return pk.SubscribeEncode(buf)
	case packets.Suback:
		return pk.SubackEncode(buf)
	case packets.Unsubscribe:
		return pk.UnsubscribeEncode(buf)
	case packets.Unsuback:
		return pk.UnsubackEncode(buf)
	case packets.Pingreq:
		return pk.PingreqEncode(buf)
	case packets.Pingresp:
		return pk.PingrespEncode(buf)
	case packets.Disconnect:
		return pk.DisconnectEncode(buf)
	case packets.Auth:
		return pk.AuthEncode(buf)
	}
	return fmt.Errorf("%w: cannot encode packet type %d", ErrMalformed, pk.FixedHeader.Type)
}
