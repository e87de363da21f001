package frame

import (
	"bytes"
	"strconv"
	"strings"
)

// Version is a STOMP protocol version.
type Version uint8

// The versions this codec speaks.
const (
	V10 Version = iota + 1
	V11
	V12
)

func (v Version) String() string {
	switch v {
	case V10:
		return "1.0"
	case V11:
		return "1.1"
	case V12:
		return "1.2"
	}
	return "?"
}

// ParseVersion maps "1.0", "1.1" and "1.2" to a Version.
func ParseVersion(s string) (Version, bool) {
	switch s {
	case "1.0":
		return V10, true
	case "1.1":
		return V11, true
	case "1.2":
		return V12, true
	}
	return 0, false
}

// Client and server commands.
const (
	CONNECT     = "CONNECT"
	STOMP       = "STOMP"
	CONNECTED   = "CONNECTED"
	SEND        = "SEND"
	SUBSCRIBE   = "SUBSCRIBE"
	UNSUBSCRIBE = "UNSUBSCRIBE"
	ACK         = "ACK"
	NACK        = "NACK"
	BEGIN       = "BEGIN"
	COMMIT      = "COMMIT"
	ABORT       = "ABORT"
	DISCONNECT  = "DISCONNECT"
	MESSAGE     = "MESSAGE"
	RECEIPT     = "RECEIPT"
	ERROR       = "ERROR"
)

// Header is one header line, unescaped.
type Header struct {
	Key, Value string
}

// Frame is one STOMP frame. A frame returned by Reader.Read shares its
// Headers slice with the next Read; Body is always the caller's.
type Frame struct {
	Command string
	Headers []Header
	Body    []byte
}

// Get returns the first value of key (1.2: the first occurrence wins).
func (f *Frame) Get(key string) (string, bool) {
	for i := range f.Headers {
		if f.Headers[i].Key == key {
			return f.Headers[i].Value, true
		}
	}
	return "", false
}

// Value returns the first value of key, or "".
func (f *Frame) Value(key string) string {
	v, _ := f.Get(key)
	return v
}

// Limits bound what Parse accepts. A zero field takes its default.
type Limits struct {
	// MaxFrameSize bounds a whole frame: command, headers, body, NUL.
	MaxFrameSize int
	// MaxHeaders bounds the number of header lines.
	MaxHeaders int
	// MaxHeaderLength bounds one header line (key, colon and value, escaped).
	MaxHeaderLength int
	// MaxBodySize bounds the body.
	MaxBodySize int
}

// Default limits.
const (
	DefaultMaxHeaders      = 1000
	DefaultMaxHeaderLength = 64 << 10
	DefaultMaxBodySize     = 128 << 20
	// headerBlockSlack is what a frame may add to MaxBodySize by default.
	headerBlockSlack = 1 << 20
)

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = DefaultMaxHeaders
	}
	if l.MaxHeaderLength <= 0 {
		l.MaxHeaderLength = DefaultMaxHeaderLength
	}
	if l.MaxBodySize <= 0 {
		l.MaxBodySize = DefaultMaxBodySize
	}
	if l.MaxFrameSize <= 0 {
		l.MaxFrameSize = l.MaxBodySize + headerBlockSlack
	}
	return l
}

// Error is a malformed or oversized frame. Message is the short text for
// the ERROR frame's message header, Detail its body.
type Error struct {
	Message string
	Detail  string
}

func (e *Error) Error() string { return "stomp frame: " + e.Message + ": " + e.Detail }

func errf(msg, detail string) *Error { return &Error{Message: msg, Detail: detail} }

// noEscape reports whether cmd's headers are sent verbatim in every version.
func noEscape(cmd string) bool { return cmd == CONNECT || cmd == STOMP || cmd == CONNECTED }

// Parse decodes the frame at the start of b for protocol version v (use V10
// before the version is negotiated; CONNECT is never escaped anyway).
//
//   - A frame: f.Command is set and n is the number of bytes it used.
//   - Heart-beats only: f.Command is "" and n > 0 counts the EOLs skipped.
//   - Not enough bytes yet: n == 0 and err == nil.
//   - Malformed or over a limit: err is an *Error.
//
// f.Headers is appended to dst (which may be nil), so a caller can reuse it.
func Parse(b []byte, v Version, lim Limits, dst []Header) (Frame, int, error) {
	f, n, _, err := parse(b, v, lim.WithDefaults(), dst)
	if err != nil {
		return f, n, err
	}
	return f, n, nil // not a nil *Error in a non-nil error
}

// incomplete says what parse is waiting for when it needs more bytes.
type incomplete struct {
	need   int  // total bytes needed (content-length known), else 0
	forNUL bool // the body is read up to a NUL: rescan only when one arrives
	body   int  // offset of the body (forNUL)
	from   int  // offset (from the frame start) where the NUL search may resume
}

// HeartBeats is the length of the run of EOLs (heart-beats: "\n" or
// "\r\n") at the start of b.
func HeartBeats(b []byte) int {
	i := 0
	for i < len(b) {
		if b[i] == '\n' {
			i++
		} else if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			i += 2
		} else {
			break
		}
	}
	return i
}

// parse is Parse with limits already defaulted; it also says what is missing.
func parse(b []byte, v Version, lim Limits, dst []Header) (Frame, int, incomplete, *Error) {
	var f Frame
	if i := HeartBeats(b); i > 0 {
		return f, i, incomplete{}, nil
	}
	if len(b) == 0 || (len(b) == 1 && b[0] == '\r') {
		return f, 0, incomplete{}, nil
	}
	// Command line.
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || nl > lim.MaxHeaderLength {
		if nl > 0 || len(b) > lim.MaxHeaderLength {
			return f, 0, incomplete{}, errf("Frame too large", "command line longer than "+strconv.Itoa(lim.MaxHeaderLength)+" bytes")
		}
		return f, 0, incomplete{}, nil
	}
	// Header block: up to the first empty line.
	end := -1 // offset of the empty line's '\n'
	for p := nl + 1; ; {
		q := bytes.IndexByte(b[p:], '\n')
		if q < 0 {
			if len(b)-p > lim.MaxHeaderLength {
				return f, 0, incomplete{}, errf("Header too long", "a header line is longer than "+strconv.Itoa(lim.MaxHeaderLength)+" bytes")
			}
			if len(b) > lim.MaxFrameSize {
				return f, 0, incomplete{}, errf("Frame too large", "headers larger than the frame size limit")
			}
			return f, 0, incomplete{}, nil
		}
		if q == 0 || (q == 1 && b[p] == '\r') {
			end = p + q
			break
		}
		if q > lim.MaxHeaderLength {
			return f, 0, incomplete{}, errf("Header too long", "a header line is longer than "+strconv.Itoa(lim.MaxHeaderLength)+" bytes")
		}
		p += q + 1
	}
	bodyStart := end + 1
	if bodyStart > lim.MaxFrameSize {
		return f, 0, incomplete{}, errf("Frame too large", "headers larger than the frame size limit")
	}
	// One string for command and headers; keys and values are substrings.
	block := string(b[:end])
	cmdLine, rest, _ := strings.Cut(block, "\n")
	f.Command = strings.TrimSuffix(cmdLine, "\r")
	if f.Command == "" {
		return f, 0, incomplete{}, errf("Bad frame", "empty command")
	}
	for j := 0; j < len(f.Command); j++ {
		if c := f.Command[j]; c < 'A' || c > 'Z' {
			return f, 0, incomplete{}, errf("Bad frame", "invalid command "+strconv.Quote(f.Command))
		}
	}
	escaped := v >= V11 && !noEscape(f.Command)
	f.Headers = dst[:0]
	for rest != "" {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			continue
		}
		if len(f.Headers) >= lim.MaxHeaders {
			return f, 0, incomplete{}, errf("Too many headers", "more than "+strconv.Itoa(lim.MaxHeaders)+" headers")
		}
		k, val, ok := strings.Cut(line, ":")
		if !ok {
			return f, 0, incomplete{}, errf("Bad header", "header line without a colon: "+strconv.Quote(truncate(line)))
		}
		if escaped {
			var err *Error
			if k, err = unescape(k, v); err != nil {
				return f, 0, incomplete{}, err
			}
			if val, err = unescape(val, v); err != nil {
				return f, 0, incomplete{}, err
			}
		} else if v == V10 {
			val = strings.TrimLeft(val, " \t")
		}
		f.Headers = append(f.Headers, Header{Key: k, Value: val})
	}
	// Body.
	if cl, ok := f.Get("content-length"); ok {
		size, err := strconv.Atoi(strings.TrimSpace(cl))
		if err != nil || size < 0 {
			return f, 0, incomplete{}, errf("Bad content-length", "invalid content-length "+strconv.Quote(truncate(cl)))
		}
		if size > lim.MaxBodySize || bodyStart+size+1 > lim.MaxFrameSize {
			return f, 0, incomplete{}, errf("Frame too large", "body of "+strconv.Itoa(size)+" bytes exceeds the limit of "+strconv.Itoa(lim.MaxBodySize))
		}
		total := bodyStart + size + 1
		if len(b) < total {
			return f, 0, incomplete{need: total}, nil
		}
		if b[total-1] != 0 {
			return f, 0, incomplete{}, errf("Bad frame", "frame body not terminated by NUL after content-length bytes")
		}
		f.Body = make([]byte, size)
		copy(f.Body, b[bodyStart:total-1])
		return f, total, incomplete{}, nil
	}
	z := bytes.IndexByte(b[bodyStart:], 0)
	if z < 0 {
		if len(b)-bodyStart > lim.MaxBodySize || len(b) >= lim.MaxFrameSize {
			return f, 0, incomplete{}, errf("Frame too large", "body exceeds the limit of "+strconv.Itoa(lim.MaxBodySize)+" bytes")
		}
		return f, 0, incomplete{forNUL: true, from: len(b), body: bodyStart}, nil
	}
	if z > lim.MaxBodySize {
		return f, 0, incomplete{}, errf("Frame too large", "body exceeds the limit of "+strconv.Itoa(lim.MaxBodySize)+" bytes")
	}
	if z > 0 {
		f.Body = make([]byte, z)
		copy(f.Body, b[bodyStart:bodyStart+z])
	}
	return f, bodyStart + z + 1, incomplete{}, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// unescape decodes a 1.1/1.2 header key or value.
func unescape(s string, v Version) (string, *Error) {
	i := strings.IndexByte(s, '\\')
	if i < 0 {
		return s, nil
	}
	var sb strings.Builder
	sb.Grow(len(s))
	sb.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			sb.WriteByte(c)
			continue
		}
		if i+1 == len(s) {
			return "", errf("Bad header", "header ends with a lone backslash")
		}
		i++
		switch s[i] {
		case 'n':
			sb.WriteByte('\n')
		case 'c':
			sb.WriteByte(':')
		case '\\':
			sb.WriteByte('\\')
		case 'r':
			if v < V12 {
				return "", errf("Bad header", `undefined escape sequence \r in STOMP 1.1`)
			}
			sb.WriteByte('\r')
		default:
			return "", errf("Bad header", `undefined escape sequence \`+string(s[i]))
		}
	}
	return sb.String(), nil
}

// AppendCommand appends the command line.
func AppendCommand(dst []byte, cmd string) []byte {
	dst = append(dst, cmd...)
	return append(dst, '\n')
}

// AppendHeader appends one header line, escaped as version v requires.
// Pass V10 for frames that are never escaped (CONNECTED). In 1.0, which
// has no escaping, EOLs in keys and values are replaced by spaces and a
// colon in a key by an underscore, so that a frame stays a frame.
func AppendHeader(dst []byte, key, value string, v Version) []byte {
	if v == V10 {
		dst = appendRaw(dst, key, true)
		dst = append(dst, ':')
		dst = appendRaw(dst, value, false)
		return append(dst, '\n')
	}
	dst = appendEscaped(dst, key, v)
	dst = append(dst, ':')
	dst = appendEscaped(dst, value, v)
	return append(dst, '\n')
}

// AppendHeaderInt appends a header with a decimal value.
func AppendHeaderInt(dst []byte, key string, value int64) []byte {
	dst = append(dst, key...)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, value, 10)
	return append(dst, '\n')
}

func appendRaw(dst []byte, s string, isKey bool) []byte {
	if strings.IndexAny(s, "\r\n:") < 0 {
		return append(dst, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\r' || c == '\n':
			dst = append(dst, ' ')
		case c == ':' && isKey:
			dst = append(dst, '_')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

func appendEscaped(dst []byte, s string, v Version) []byte {
	if strings.IndexAny(s, "\r\n:\\") < 0 {
		return append(dst, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\n':
			dst = append(dst, '\\', 'n')
		case ':':
			dst = append(dst, '\\', 'c')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\r':
			if v >= V12 {
				dst = append(dst, '\\', 'r')
			} else {
				dst = append(dst, ' ') // 1.1 cannot carry a CR
			}
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// AppendBody ends the header block and appends body and the NUL. The
// caller writes a content-length header first if the body may hold NULs.
func AppendBody(dst, body []byte) []byte {
	dst = append(dst, '\n')
	dst = append(dst, body...)
	return append(dst, 0)
}

// Append encodes f for version v. A content-length header is added when
// the body is not empty and f has none.
func Append(dst []byte, f *Frame, v Version) []byte {
	ev := v
	if noEscape(f.Command) {
		ev = V10
	}
	dst = AppendCommand(dst, f.Command)
	for _, h := range f.Headers {
		dst = AppendHeader(dst, h.Key, h.Value, ev)
	}
	if len(f.Body) > 0 {
		if _, ok := f.Get("content-length"); !ok {
			dst = AppendHeaderInt(dst, "content-length", int64(len(f.Body)))
		}
	}
	return AppendBody(dst, f.Body)
}
