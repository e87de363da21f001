package wire

import (
	"bufio"
	"encoding/binary"
	"io"
	"slices"
)

// ProtocolHeader is what an AMQP 0-9-1 client sends first, and what a
// server answers with before closing when it receives anything else.
const ProtocolHeader = "AMQP\x00\x00\x09\x01"

// FrameOverhead is the size of a frame's header (type, channel, size) and
// frame-end octet. A body frame carries at most frameMax-FrameOverhead bytes.
const FrameOverhead = 8

// CheckProtocolHeader checks the 8 bytes a client sends on connecting. It
// returns ErrBadProtocolHeader for anything but ProtocolHeader (including
// other AMQP versions) and io.ErrUnexpectedEOF when h is shorter than 8
// bytes.
func CheckProtocolHeader(h []byte) error {
	if len(h) < len(ProtocolHeader) {
		return io.ErrUnexpectedEOF
	}
	if string(h[:len(ProtocolHeader)]) != ProtocolHeader {
		return ErrBadProtocolHeader
	}
	return nil
}

// Frame is one AMQP frame. Type is FrameMethod, FrameHeader, FrameBody or
// FrameHeartbeat (other values are passed through for the caller to reject
// with UnexpectedFrame or FrameError as it sees fit).
type Frame struct {
	Type    uint8
	Channel uint16
	Payload []byte
}

// ReadFrame reads one frame from r.
//
// maxSize is the negotiated frame-max, the largest whole frame including
// FrameOverhead; 0 means no limit (callers should always pass a bound, such
// as FrameMinSize before connection.tune-ok). A larger frame is rejected
// with a FrameError *Error before its payload is read or allocated.
//
// The payload is read into buf when cap(buf) is large enough, so passing the
// previous frame's Payload[:0] reuses one buffer for a connection;
// otherwise a new slice is allocated. The Payload is valid until buf is
// reused.
//
// A missing frame-end octet is a FrameError *Error. Errors of r are
// returned as they are, except that io.EOF inside a frame becomes
// io.ErrUnexpectedEOF: io.EOF means the peer closed between frames.
func ReadFrame(r *bufio.Reader, maxSize uint32, buf []byte) (Frame, error) {
	hdr, err := r.Peek(7)
	if err != nil {
		if err == io.EOF && len(hdr) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	f := Frame{Type: hdr[0], Channel: binary.BigEndian.Uint16(hdr[1:])}
	size := binary.BigEndian.Uint32(hdr[3:])
	r.Discard(7)
	if maxSize != 0 && uint64(size)+FrameOverhead > uint64(maxSize) {
		return f, frameError("frame of type %d on channel %d is %d bytes, larger than frame-max %d",
			f.Type, f.Channel, uint64(size)+FrameOverhead, maxSize)
	}
	buf, err = readPayload(r, buf, int(size))
	if err != nil {
		return f, err
	}
	end, err := r.ReadByte()
	if err != nil {
		return f, unexpected(err)
	}
	if end != FrameEnd {
		return f, frameError("frame-end octet 0x%02x instead of 0xce on channel %d", end, f.Channel)
	}
	f.Payload = buf
	return f, nil
}

// FrameBuffered reports whether r holds a whole next frame, so that
// ReadFrame returns it without waiting for the peer.
func FrameBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n < 7 {
		return false
	}
	h, _ := r.Peek(7)
	return uint64(n) >= uint64(binary.BigEndian.Uint32(h[3:]))+FrameOverhead
}

// readChunk is the most ReadFrame allocates ahead of the data it has read.
const readChunk = 64 << 10

// readPayload reads size bytes into buf, reusing it if it is large enough.
// Otherwise it grows the buffer as data arrives, so that a peer announcing
// a huge frame and sending nothing costs no more than readChunk.
func readPayload(r *bufio.Reader, buf []byte, size int) ([]byte, error) {
	if cap(buf) >= size {
		buf = buf[:size]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, unexpected(err)
		}
		return buf, nil
	}
	buf = make([]byte, 0, min(size, readChunk))
	for len(buf) < size {
		n := min(size-len(buf), max(len(buf), readChunk))
		buf = slices.Grow(buf, n)
		k, err := io.ReadFull(r, buf[len(buf):len(buf)+n])
		buf = buf[:len(buf)+k]
		if err != nil {
			return nil, unexpected(err)
		}
	}
	return buf, nil
}

// unexpected turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ParseFrame decodes one frame from the start of b, returning it (its
// Payload aliases b) and the number of bytes it took. It returns
// io.ErrUnexpectedEOF when b holds only part of a frame, and a FrameError
// *Error as ReadFrame does.
func ParseFrame(b []byte, maxSize uint32) (Frame, int, error) {
	if len(b) < 7 {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	f := Frame{Type: b[0], Channel: binary.BigEndian.Uint16(b[1:])}
	size := binary.BigEndian.Uint32(b[3:])
	if maxSize != 0 && uint64(size)+FrameOverhead > uint64(maxSize) {
		return f, 0, frameError("frame of type %d on channel %d is %d bytes, larger than frame-max %d",
			f.Type, f.Channel, uint64(size)+FrameOverhead, maxSize)
	}
	if uint64(len(b)) < uint64(size)+FrameOverhead {
		return f, 0, io.ErrUnexpectedEOF
	}
	n := int(size) + FrameOverhead
	if b[n-1] != FrameEnd {
		return f, 0, frameError("frame-end octet 0x%02x instead of 0xce on channel %d", b[n-1], f.Channel)
	}
	f.Payload = b[7 : n-1 : n-1]
	return f, n, nil
}

// AppendFrame appends a whole frame: header, payload and frame-end octet.
// The payload must not exceed 4 GiB.
func AppendFrame(b []byte, typ uint8, channel uint16, payload []byte) []byte {
	b = appendFrameHeader(b, typ, channel, uint32(len(payload)))
	b = append(b, payload...)
	return append(b, FrameEnd)
}

func appendFrameHeader(b []byte, typ uint8, channel uint16, size uint32) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint16(b, channel)
	return binary.BigEndian.AppendUint32(b, size)
}

// beginFrame appends a frame header with a size to be set by endFrame and
// returns the offset of the header.
func beginFrame(b []byte, typ uint8, channel uint16) ([]byte, int) {
	return appendFrameHeader(b, typ, channel, 0), len(b)
}

// endFrame sets the size of the frame started at start and appends the
// frame-end octet.
func endFrame(b []byte, start int) []byte {
	binary.BigEndian.PutUint32(b[start+3:], uint32(len(b)-start-7))
	return append(b, FrameEnd)
}

// AppendMethodFrame appends a whole method frame for m on channel.
func AppendMethodFrame(b []byte, channel uint16, m Method) ([]byte, error) {
	b, start := beginFrame(b, FrameMethod, channel)
	b, err := AppendMethod(b, m)
	if err != nil {
		return b[:start], err
	}
	return endFrame(b, start), nil
}

// AppendHeaderFrame appends a whole content header frame for the basic
// class on channel.
func AppendHeaderFrame(b []byte, channel uint16, bodySize uint64, p *Properties) ([]byte, error) {
	b, start := beginFrame(b, FrameHeader, channel)
	b, err := AppendContentHeader(b, ClassBasic, bodySize, p)
	if err != nil {
		return b[:start], err
	}
	return endFrame(b, start), nil
}

// heartbeatFrame is the whole heartbeat frame (always on channel 0).
var heartbeatFrame = [...]byte{FrameHeartbeat, 0, 0, 0, 0, 0, 0, FrameEnd}

// AppendHeartbeat appends a heartbeat frame.
func AppendHeartbeat(b []byte) []byte { return append(b, heartbeatFrame[:]...) }
