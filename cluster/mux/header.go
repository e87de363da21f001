package mux

import (
	"errors"
	"fmt"
)

// Magic opens every mux connection; Version is the header version this
// package writes and accepts.
const (
	Magic   = "TRMX"
	Version = 2
)

// MaxHeaderLen bounds an encoded header: magic, version and three fields
// of at most 255 bytes, each behind a one-byte length.
const MaxHeaderLen = len(Magic) + 1 + 3*(1+255)

// Header is what a dialer sends before the stream's bytes.
type Header struct {
	Stream string // stream name, 1..255 bytes
	Nonce  string // the dialer's challenge, NonceLen random bytes (0..255 on the wire)
	Addr   string // the dialer's advertised mux address, 0..255 bytes
}

// Header decoding and encoding errors.
var (
	// ErrShortHeader means the bytes given are a prefix of a header; see
	// DecodeHeader for how many are needed.
	ErrShortHeader = errors.New("mux: short header")
	// ErrBadMagic means the connection does not speak this protocol.
	ErrBadMagic = errors.New("mux: bad magic")
	// ErrBadVersion means a header version this package does not know.
	ErrBadVersion = errors.New("mux: unsupported header version")
	// ErrBadHeader means a field is out of bounds (empty stream name, a
	// field longer than 255 bytes).
	ErrBadHeader = errors.New("mux: bad header")
)

// AppendHeader appends h's encoding to dst. It fails with ErrBadHeader if
// the stream name is empty or a field is longer than 255 bytes.
func AppendHeader(dst []byte, h Header) ([]byte, error) {
	if h.Stream == "" {
		return dst, fmt.Errorf("%w: empty stream name", ErrBadHeader)
	}
	for _, f := range []string{h.Stream, h.Nonce, h.Addr} {
		if len(f) > 255 {
			return dst, fmt.Errorf("%w: field of %d bytes", ErrBadHeader, len(f))
		}
	}
	dst = append(dst, Magic...)
	dst = append(dst, Version)
	for _, f := range []string{h.Stream, h.Nonce, h.Addr} {
		dst = append(dst, byte(len(f)))
		dst = append(dst, f...)
	}
	return dst, nil
}

// DecodeHeader decodes the header at the start of b and returns it with
// the number of bytes it took. When b is only a prefix of a header it
// returns ErrShortHeader and, as n, the total length b must reach before
// decoding can go further (never more than MaxHeaderLen), so a reader can
// read exactly the header and nothing after it. Other errors are
// ErrBadMagic, ErrBadVersion and ErrBadHeader. DecodeHeader is pure.
func DecodeHeader(b []byte) (h Header, n int, err error) {
	const fixed = len(Magic) + 1
	if len(b) < fixed {
		if string(b) != Magic[:min(len(b), len(Magic))] {
			return Header{}, 0, ErrBadMagic
		}
		return Header{}, fixed, ErrShortHeader
	}
	if string(b[:len(Magic)]) != Magic {
		return Header{}, 0, ErrBadMagic
	}
	if b[len(Magic)] != Version {
		return Header{}, 0, fmt.Errorf("%w: %d", ErrBadVersion, b[len(Magic)])
	}
	var fields [3]string
	off := fixed
	for i := range fields {
		if len(b) < off+1 {
			return Header{}, off + 1, ErrShortHeader
		}
		l := int(b[off])
		if len(b) < off+1+l {
			return Header{}, off + 1 + l, ErrShortHeader
		}
		fields[i] = string(b[off+1 : off+1+l])
		off += 1 + l
	}
	if fields[0] == "" {
		return Header{}, 0, fmt.Errorf("%w: empty stream name", ErrBadHeader)
	}
	return Header{Stream: fields[0], Nonce: fields[1], Addr: fields[2]}, off, nil
}

// Status is the acceptor's one-byte answer to a header.
type Status byte

// Statuses. Anything but StatusOK is followed by the acceptor closing the
// connection.
const (
	StatusOK            Status = 0
	StatusUnknownStream Status = 1 // no listener for the stream name
	StatusBadCookie     Status = 2 // the dialer did not prove the cookie
	StatusBadHeader     Status = 3 // bad magic, version or field
	StatusBlocked       Status = 4 // the dialer is blocked (SetBlocked)
	// StatusChallenge is not a refusal: the acceptor's nonce and proof
	// follow (auth.go), and the final status comes after the dialer's
	// proof.
	StatusChallenge Status = 5
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusUnknownStream:
		return "unknown stream"
	case StatusBadCookie:
		return "bad cookie"
	case StatusBadHeader:
		return "bad header"
	case StatusBlocked:
		return "blocked"
	case StatusChallenge:
		return "challenge"
	}
	return fmt.Sprintf("status %d", byte(s))
}

// RefusedError is returned by Dial when the acceptor answered a Status
// other than StatusOK.
type RefusedError struct {
	Addr   string
	Stream string
	Status Status
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("mux: %s refused stream %q: %s", e.Addr, e.Stream, e.Status)
}
