package frame

import (
	"bytes"
	"errors"
	"io"
	"strconv"
)

// minRead is the smallest free space the Reader asks its source to fill.
const minRead = 32 << 10

// initialBuf is a new Reader's buffer: small, so that idle and half-open
// connections stay cheap; it doubles as frames need.
const initialBuf = 4 << 10

// shrinkAbove is the buffer size above which an empty buffer is replaced.
const shrinkAbove = 1 << 20

// Reader reads frames from an io.Reader through a buffer that grows to at
// most Limits.MaxFrameSize. It grows as bytes arrive, doubling at most: a
// frame's content-length header never makes it reserve the declared size
// up front, so a peer that declares a large body and sends it slowly (or
// never) costs what it sent, not what it declared. It is not safe for
// concurrent use.
type Reader struct {
	src     io.Reader
	lim     Limits
	version Version
	buf     []byte
	start   int // first unparsed byte
	end     int // end of buffered data
	hdrs    []Header
	// OnHeartbeat, if set, is called for every heart-beat EOL run read.
	OnHeartbeat func()
}

// NewReader returns a Reader over src; the version starts at V10 (no
// escaping) until SetVersion.
func NewReader(src io.Reader, lim Limits) *Reader {
	return &Reader{src: src, lim: lim.WithDefaults(), version: V10, buf: make([]byte, initialBuf)}
}

// SetVersion sets the version used to unescape headers.
func (r *Reader) SetVersion(v Version) { r.version = v }

// SetLimits replaces the limits for the frames not yet returned, e.g.
// raising a pre-login bound after a successful login. Bytes already
// buffered are kept.
func (r *Reader) SetLimits(lim Limits) { r.lim = lim.WithDefaults() }

// Buffered reports whether a complete or partial frame is already buffered.
func (r *Reader) Buffered() int { return r.end - r.start }

// Read returns the next frame, skipping heart-beats. Its Headers are valid
// until the next Read; its Body is the caller's. Errors are an *Error for a
// bad frame, or the source's error (io.EOF at a frame boundary,
// io.ErrUnexpectedEOF inside one).
func (r *Reader) Read() (Frame, error) {
	var wait incomplete
	for {
		if r.end > r.start && r.ready(wait) {
			f, n, inc, err := parse(r.buf[r.start:r.end], r.version, r.lim, r.hdrs)
			if err != nil {
				return Frame{}, err
			}
			if n > 0 {
				r.start += n
				if f.Command == "" {
					if r.OnHeartbeat != nil {
						r.OnHeartbeat()
					}
					wait = incomplete{}
					continue
				}
				r.hdrs = f.Headers
				if r.start == r.end {
					r.start, r.end = 0, 0
					if len(r.buf) > shrinkAbove {
						r.buf = make([]byte, initialBuf) // give a big frame's buffer back
					}
				}
				return f, nil
			}
			wait = inc
		}
		if err := r.fill(wait); err != nil {
			if errors.Is(err, io.EOF) && r.end > r.start {
				return Frame{}, io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
	}
}

// ready reports whether the buffered bytes may now hold what parse waited for.
func (r *Reader) ready(w incomplete) bool {
	switch {
	case w.need > 0:
		return r.end-r.start >= w.need
	case w.forNUL:
		if r.end-r.start >= r.lim.MaxFrameSize || r.end-r.start-w.body > r.lim.MaxBodySize {
			return true // parse reports the frame as too large
		}
		from := r.start + w.from
		return from < r.end && bytes.IndexByte(r.buf[from:r.end], 0) >= 0
	}
	return true
}

// fill reads more data, compacting or growing the buffer as needed. The
// buffer never grows past MaxFrameSize, and never to more than twice its
// size at a time (or what w says the frame needs, if that is less): what
// it holds is at least half what was read.
func (r *Reader) fill(w incomplete) error {
	// Ask for at least minRead bytes, or half a small buffer.
	free := min(minRead, len(r.buf)/2)
	if r.start > 0 && (r.start == r.end || len(r.buf)-r.end < free) {
		n := copy(r.buf, r.buf[r.start:r.end])
		r.end = n
		r.start = 0
	}
	if len(r.buf)-r.end < free {
		want := 2 * len(r.buf)
		if w.need > len(r.buf) && w.need < want {
			want = w.need // the frame's exact size, when known and smaller
		}
		want = min(want, r.lim.MaxFrameSize)
		if want > len(r.buf) {
			nb := make([]byte, want)
			copy(nb, r.buf[:r.end])
			r.buf = nb
		} else if r.end == len(r.buf) {
			// Cannot happen while limits hold: parse fails first.
			return &Error{Message: "Frame too large", Detail: "frame exceeds the size limit of " + strconv.Itoa(r.lim.MaxFrameSize) + " bytes"}
		}
		// else: at the limit, read into what is left.
	}
	n, err := r.src.Read(r.buf[r.end:])
	r.end += n
	if n > 0 {
		return nil
	}
	if err == nil {
		return nil
	}
	return err
}
