package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ReadFrame reads one frame into buf (grown as needed, never past max)
// and returns its payload (key onwards), which aliases buf. A size over
// max is ErrFrameTooLarge, read no further.
func ReadFrame(r io.Reader, max uint32, buf []byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > max {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	if n < 4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, n)
	}
	if uint32(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// dec reads fields off a payload; the first short read sets err and every
// later read returns zero values.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail() {
	if d.err == nil {
		d.err = ErrMalformed
	}
	d.b = nil
}

func (d *dec) u8() uint8 {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) u16() uint16 {
	if len(d.b) < 2 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *dec) u32() uint32 {
	if len(d.b) < 4 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *dec) u64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// str reads a string (int16 length, -1 null).
func (d *dec) str() string {
	n := int16(d.u16())
	if n < 0 {
		if n != -1 {
			d.fail()
		}
		return ""
	}
	if len(d.b) < int(n) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// bytes reads bytes (int32 length, -1 null), aliasing the payload.
func (d *dec) bytes() []byte {
	n := int32(d.u32())
	if n < 0 {
		if n != -1 {
			d.fail()
		}
		return nil
	}
	if len(d.b) < int(n) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// count reads an array length, each element taking at least min bytes: a
// length the rest of the payload cannot hold is malformed (so no array is
// allocated beyond the frame's size).
func (d *dec) count(min int) int {
	n := int32(d.u32())
	if n < 0 || int(n)*min > len(d.b) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *dec) kvs() []KV {
	n := d.count(4)
	if n == 0 {
		return nil
	}
	out := make([]KV, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str()
		v := d.str()
		out = append(out, KV{k, v})
	}
	return out
}

func (d *dec) strs() []string {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.str())
	}
	return out
}

// Decode decodes a client frame's payload (as ReadFrame returns it). Byte
// slices in the result alias p. An unknown key is an *UnknownKeyError;
// fields that do not fit, or bytes left over, are ErrMalformed.
func Decode(p []byte) (Frame, error) {
	d := &dec{b: p}
	k := d.u16()
	ver := d.u16()
	if d.err != nil {
		return nil, d.err
	}
	var f Frame
	switch k {
	case KeyPeerProperties:
		c := d.u32()
		f = PeerProperties{Corr: c, Props: d.kvs()}
	case KeySaslHandshake:
		f = SaslHandshake{Corr: d.u32()}
	case KeySaslAuthenticate:
		c := d.u32()
		m := d.str()
		f = SaslAuthenticate{Corr: c, Mechanism: m, Data: d.bytes()}
	case KeyTune, KeyTune | ResponseBit:
		fm := d.u32()
		f = Tune{FrameMax: fm, Heartbeat: d.u32()}
	case KeyOpen:
		c := d.u32()
		f = Open{Corr: c, VHost: d.str()}
	case KeyClose:
		c := d.u32()
		code := Code(d.u16())
		f = Close{Corr: c, Code: code, Reason: d.str()}
	case KeyClose | ResponseBit:
		c := d.u32()
		f = CloseResponse{Corr: c, Code: Code(d.u16())}
	case KeyHeartbeat:
		f = Heartbeat{}
	case KeyDeclarePublisher:
		c := d.u32()
		id := d.u8()
		ref := d.str()
		f = DeclarePublisher{Corr: c, ID: id, Reference: ref, Stream: d.str()}
	case KeyPublish:
		f = decodePublish(d, ver)
	case KeyQueryPublisherSequence:
		c := d.u32()
		ref := d.str()
		f = QueryPublisherSequence{Corr: c, Reference: ref, Stream: d.str()}
	case KeyDeletePublisher:
		c := d.u32()
		f = DeletePublisher{Corr: c, ID: d.u8()}
	case KeySubscribe:
		s := Subscribe{Corr: d.u32(), ID: d.u8(), Stream: d.str(), OffsetType: d.u16()}
		if s.OffsetType == OffsetOffset || s.OffsetType == OffsetTimestamp {
			s.Offset = d.u64()
		}
		s.Credit = d.u16()
		if len(d.b) > 0 { // properties came with version 1 too, later
			s.Props = d.kvs()
		}
		f = s
	case KeyCredit:
		id := d.u8()
		f = Credit{ID: id, Credit: d.u16()}
	case KeyStoreOffset:
		ref := d.str()
		st := d.str()
		f = StoreOffset{Reference: ref, Stream: st, Offset: d.u64()}
	case KeyQueryOffset:
		c := d.u32()
		ref := d.str()
		f = QueryOffset{Corr: c, Reference: ref, Stream: d.str()}
	case KeyUnsubscribe:
		c := d.u32()
		f = Unsubscribe{Corr: c, ID: d.u8()}
	case KeyCreate:
		c := d.u32()
		st := d.str()
		f = Create{Corr: c, Stream: st, Args: d.kvs()}
	case KeyDelete:
		c := d.u32()
		f = Delete{Corr: c, Stream: d.str()}
	case KeyMetadata:
		c := d.u32()
		f = Metadata{Corr: c, Streams: d.strs()}
	case KeyExchangeCommandVersions:
		c := d.u32()
		n := d.count(6)
		e := ExchangeCommandVersions{Corr: c}
		for i := 0; i < n && d.err == nil; i++ {
			e.Commands = append(e.Commands, CommandVersion{Key: d.u16(), Min: d.u16(), Max: d.u16()})
		}
		f = e
	case KeyStreamStats:
		c := d.u32()
		f = StreamStats{Corr: c, Stream: d.str()}
	case KeyRoute:
		c := d.u32()
		rk := d.str()
		f = Route{Corr: c, RoutingKey: rk, SuperStream: d.str()}
	case KeyPartitions:
		c := d.u32()
		f = Partitions{Corr: c, SuperStream: d.str()}
	case KeyConsumerUpdate | ResponseBit:
		u := ConsumerUpdateResponse{Corr: d.u32(), Code: Code(d.u16()), OffsetType: d.u16()}
		if u.OffsetType == OffsetOffset || u.OffsetType == OffsetTimestamp {
			u.Offset = d.u64()
		}
		f = u
	case KeyCreateSuperStream:
		c := d.u32()
		name := d.str()
		parts := d.strs()
		keys := d.strs()
		f = CreateSuperStream{Corr: c, Name: name, Partitions: parts, BindingKeys: keys, Args: d.kvs()}
	case KeyDeleteSuperStream:
		c := d.u32()
		f = DeleteSuperStream{Corr: c, Name: d.str()}
	default:
		e := &UnknownKeyError{Key: k}
		if len(d.b) >= 4 && k&ResponseBit == 0 {
			e.Corr = binary.BigEndian.Uint32(d.b)
		}
		return nil, e
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: key %#04x", d.err, k)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: key %#04x: %d bytes left over", ErrMalformed, k, len(d.b))
	}
	return f, nil
}

func decodePublish(d *dec, ver uint16) Frame {
	p := Publish{Version: ver, ID: d.u8()}
	min := 12 // id and the message's length
	if ver >= 2 {
		min += 2
	}
	n := d.count(min)
	if n > 0 {
		p.Messages = make([]PublishedMessage, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		m := PublishedMessage{ID: d.u64()}
		if ver >= 2 {
			m.Filter = d.str()
		}
		m.Data = d.bytes()
		p.Messages = append(p.Messages, m)
	}
	return p
}
