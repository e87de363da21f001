package wire

import "bufio"

// The Write functions encode frames straight into the free space of a
// bufio.Writer (bufio.Writer.AvailableBuffer), so writing a method or a
// whole message allocates nothing as long as its method and content header
// frames fit in the writer's buffer. They never flush for their own sake:
// when less than flushBelow bytes are free they flush first, as the writer
// would have to anyway, so that encoding does not outgrow the buffer.
// Choose a buffer of a few times the typical message size (64 KiB, say).

// flushBelow is the free space under which the Write functions flush
// before encoding a method and content header.
const flushBelow = 1024

// reserve flushes w when less than n bytes are free and something is
// buffered.
func reserve(w *bufio.Writer, n int) error {
	if w.Available() < n && w.Buffered() > 0 {
		return w.Flush()
	}
	return nil
}

// WriteMethod writes a method frame for m on channel. It does not flush.
// Only encoding errors (see Method.AppendArgs) and w's errors are returned.
func WriteMethod(w *bufio.Writer, channel uint16, m Method) error {
	if err := reserve(w, flushBelow); err != nil {
		return err
	}
	b, err := AppendMethodFrame(w.AvailableBuffer(), channel, m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// WriteFrame writes a whole frame. It does not flush.
func WriteFrame(w *bufio.Writer, f Frame) error {
	if err := reserve(w, FrameOverhead); err != nil {
		return err
	}
	b := appendFrameHeader(w.AvailableBuffer(), f.Type, f.Channel, uint32(len(f.Payload)))
	if _, err := w.Write(b); err != nil {
		return err
	}
	if _, err := w.Write(f.Payload); err != nil {
		return err
	}
	return w.WriteByte(FrameEnd)
}

// WriteHeartbeat writes a heartbeat frame. It does not flush.
func WriteHeartbeat(w *bufio.Writer) error {
	_, err := w.Write(heartbeatFrame[:])
	return err
}

// WriteContent writes a method that carries content (basic.publish,
// basic.deliver, basic.get-ok, basic.return) followed by its content header
// and the body, split into body frames of at most frameMax-FrameOverhead
// bytes; an empty body has no body frame. frameMax is the negotiated
// frame-max: 0 means no limit, and a value below FrameMinSize is taken as
// FrameMinSize. p may be nil. It does not flush.
//
// Small messages are encoded into w's buffer in one piece; a large body is
// handed to w as is (a body larger than w's buffer is written through
// without copying).
func WriteContent(w *bufio.Writer, channel uint16, m Method, p *Properties, body []byte, frameMax uint32) error {
	if err := reserve(w, flushBelow); err != nil {
		return err
	}
	b, err := AppendMethodFrame(w.AvailableBuffer(), channel, m)
	if err != nil {
		return err
	}
	if b, err = AppendHeaderFrame(b, channel, uint64(len(body)), p); err != nil {
		return err
	}
	maxBody := len(body)
	if frameMax != 0 {
		maxBody = int(max(frameMax, FrameMinSize) - FrameOverhead)
	}
	if len(body) == 0 {
		_, err = w.Write(b)
		return err
	}
	frames := (len(body) + maxBody - 1) / maxBody
	if cap(b)-len(b) >= len(body)+frames*FrameOverhead {
		// Everything fits in w's buffer: one copy, one Write.
		for rest := body; len(rest) > 0; {
			n := min(len(rest), maxBody)
			b = AppendFrame(b, FrameBody, channel, rest[:n])
			rest = rest[n:]
		}
		_, err = w.Write(b)
		return err
	}
	if _, err = w.Write(b); err != nil {
		return err
	}
	for rest := body; len(rest) > 0; {
		n := min(len(rest), maxBody)
		if err := reserve(w, 7); err != nil {
			return err
		}
		if _, err := w.Write(appendFrameHeader(w.AvailableBuffer(), FrameBody, channel, uint32(n))); err != nil {
			return err
		}
		if _, err := w.Write(rest[:n]); err != nil {
			return err
		}
		if err := w.WriteByte(FrameEnd); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}
