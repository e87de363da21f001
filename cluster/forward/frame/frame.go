// Package frame is the codec of the forwarding RPC between cluster nodes
// (cluster/forward): framed, versioned binary messages for publish,
// consume/deliver, settle, get, purge, count and credit. It is pure: bytes
// in, typed frames or a typed error out; it opens no socket, takes no lock
// and knows no queue.
//
// # Framing
//
// Every frame is a 4-byte big-endian length n (1 ≤ n ≤ MaxFrame), then n
// bytes: a type byte and the type's payload. Integers in a payload are
// unsigned varints unless said otherwise, strings and byte strings a
// varint length and the bytes. Every length and count is checked against
// what is left of the frame before anything is allocated for it, so a
// frame never makes the decoder allocate more than its own size (times a
// small constant for maps), whatever its bytes say; nesting is bounded by
// MaxDepth.
//
// # Versions
//
// The first frame on a connection is the client's Hello, carrying Magic
// and the Version it speaks; the server answers Welcome (the same version)
// or Refuse (it speaks another) and closes. Hello, Welcome and Refuse keep
// their layout in every version. Nothing else is negotiated: a node of
// another version is refused, with an error logged on both sides.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/trident-broker/trident/exchange/headers"
)

// Version is the protocol version this codec speaks.
const Version = 1

// Magic opens a Hello: a connection that is not the forwarding RPC's is
// refused at once.
const Magic = "trident-fwd"

const (
	// HeaderSize is the length prefix's size.
	HeaderSize = 4
	// MaxFrame bounds a frame's length: a message body may be 512 MiB
	// (amqp.max_message_size), plus its properties.
	MaxFrame = 512<<20 + 1<<20
	// MaxDepth bounds the nesting of tables and arrays.
	MaxDepth = headers.MaxDepth
	// Hops is how many hop budgets a connection has (cluster/forward's
	// MaxHops): a Publish's Hop is below it.
	Hops = 3
)

// Type is a frame's type byte.
type Type uint8

// Frame types. Client to server: Hello, Publish, Consume, Qos, Cancel,
// Settle, Get, Purge, Count, Ping. Server to client: Welcome, Refuse,
// Confirm, Credit, Deliver, Cancelled, GetOK, Result, Pong.
const (
	THello Type = iota + 1
	TWelcome
	TRefuse
	TPublish
	TConfirm
	TCredit
	TConsume
	TQos
	TCancel
	TCancelled
	TDeliver
	TSettle
	TGet
	TGetOK
	TPurge
	TCount
	TResult
	TPing
	TPong
	tEnd
)

var typeNames = [...]string{"", "hello", "welcome", "refuse", "publish", "confirm", "credit", "consume",
	"qos", "cancel", "cancelled", "deliver", "settle", "get", "get-ok", "purge", "count", "result", "ping", "pong"}

func (t Type) String() string {
	if t > 0 && t < tEnd {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Frame is one decoded frame: one of the types below.
type Frame interface{ Type() Type }

// Errors. A decode error is an *Error wrapping one of them.
var (
	// ErrTooLarge: the length prefix is 0 or above MaxFrame.
	ErrTooLarge = errors.New("frame: frame length out of range")
	// ErrUnknownType: a type byte this version does not know.
	ErrUnknownType = errors.New("frame: unknown frame type")
	// ErrMalformed: the payload does not decode as its type.
	ErrMalformed = errors.New("frame: malformed frame")
	// ErrUnsupported: a header value the codec cannot carry (encoding).
	ErrUnsupported = headers.ErrUnsupported
)

// Error is a decode error: which frame type, and what was wrong.
type Error struct {
	Type Type
	Err  error
	Why  string
}

func (e *Error) Error() string {
	if e.Why == "" {
		return fmt.Sprintf("%v (%v)", e.Err, e.Type)
	}
	return fmt.Sprintf("%v (%v): %s", e.Err, e.Type, e.Why)
}

func (e *Error) Unwrap() error { return e.Err }

// ParseHeader reads a frame's length prefix (HeaderSize bytes): the number
// of bytes that follow it.
func ParseHeader(b []byte) (int, error) {
	if len(b) < HeaderSize {
		return 0, &Error{Err: ErrMalformed, Why: "short header"}
	}
	n := binary.BigEndian.Uint32(b)
	if n == 0 || n > MaxFrame {
		return 0, &Error{Err: ErrTooLarge, Why: fmt.Sprintf("length %d", n)}
	}
	return int(n), nil
}

// Decode decodes a frame's body (the n bytes after its header). The frame
// may keep references into b (message bodies); the caller must not reuse b
// while it uses the frame.
func Decode(b []byte) (Frame, error) {
	if len(b) == 0 {
		return nil, &Error{Err: ErrMalformed, Why: "empty frame"}
	}
	t := Type(b[0])
	d := newDec(b[1:])
	var f Frame
	switch t {
	case THello:
		f = d.hello()
	case TWelcome:
		f = &Welcome{Version: d.Byte(), Credit: uint32(d.UvarintBelow(1 << 32))}
	case TRefuse:
		f = &Refuse{Version: d.Byte(), Reason: d.Str()}
	case TPublish:
		p := &Publish{ID: d.Uvarint(), Hop: d.Byte(), Meta: d.Uvarint(), VHost: d.Str(), Queue: d.Str()}
		if p.Hop >= Hops {
			d.Fail("hop %d", p.Hop)
		}
		d.message(&p.Msg)
		f = p
	case TConfirm:
		f = &Confirm{ID: d.Uvarint(), OK: d.Bool(), Reason: d.Str()}
	case TCredit:
		c := &Credit{Hop: d.Byte(), N: uint32(d.UvarintBelow(1 << 32))}
		if c.Hop >= Hops {
			d.Fail("hop %d", c.Hop)
		}
		f = c
	case TConsume:
		c := &Consume{Consumer: d.Uvarint(), VHost: d.Str(), Queue: d.Str(), Prefetch: uint32(d.UvarintBelow(1 << 32)), PerConsumer: d.Bool()}
		if d.Bool() {
			c.Args = d.Table()
		}
		f = c
	case TQos:
		f = &Qos{Consumer: d.Uvarint(), Prefetch: uint32(d.UvarintBelow(1 << 32))}
	case TCancel:
		f = &Cancel{Consumer: d.Uvarint()}
	case TCancelled:
		f = &Cancelled{Consumer: d.Uvarint(), Refused: d.Bool(), Reason: d.Str()}
	case TDeliver:
		v := &Deliver{Consumer: d.Uvarint(), Delivery: d.Uvarint(), Redelivered: d.Bool()}
		d.message(&v.Msg)
		f = v
	case TSettle:
		s := &Settle{Consumer: d.Uvarint(), Op: SettleOp(d.Byte())}
		if s.Op > Reject {
			d.Fail("settle op %d", s.Op)
		}
		s.Deliveries = d.deltas()
		f = s
	case TGet:
		f = &Get{Req: d.Uvarint(), VHost: d.Str(), Queue: d.Str(), NoAck: d.Bool()}
	case TGetOK:
		g := &GetOK{Req: d.Uvarint(), Delivery: d.Uvarint(), Redelivered: d.Bool(), Remaining: d.Uvarint()}
		d.message(&g.Msg)
		f = g
	case TPurge:
		f = &Purge{Req: d.Uvarint(), VHost: d.Str(), Queue: d.Str()}
	case TCount:
		f = &Count{Req: d.Uvarint(), VHost: d.Str(), Queue: d.Str()}
	case TResult:
		f = &Result{Req: d.Uvarint(), Err: d.Str(), A: d.Uvarint(), B: d.Uvarint()}
	case TPing:
		f = &Ping{}
	case TPong:
		f = &Pong{}
	default:
		return nil, &Error{Type: t, Err: ErrUnknownType}
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	if d.Err != nil {
		return nil, &Error{Type: t, Err: ErrMalformed, Why: d.Err.Error()}
	}
	return f, nil
}

// Append appends f, with its header, to dst. It fails only on a table
// value it cannot carry (ErrUnsupported) or a frame above MaxFrame; dst is
// then returned as it was.
func Append(dst []byte, f Frame) ([]byte, error) {
	start := len(dst)
	e := newEnc(append(dst, 0, 0, 0, 0, byte(f.Type())))
	switch f := f.(type) {
	case *Hello:
		e.B = append(e.B, Magic...)
		e.B = append(e.B, f.Version)
	case *Welcome:
		e.B = append(e.B, f.Version)
		e.Uvarint(uint64(f.Credit))
	case *Refuse:
		e.B = append(e.B, f.Version)
		e.Str(f.Reason)
	case *Publish:
		e.Uvarint(f.ID)
		e.B = append(e.B, f.Hop)
		e.Uvarint(f.Meta)
		e.Str(f.VHost)
		e.Str(f.Queue)
		e.message(&f.Msg)
	case *Confirm:
		e.Uvarint(f.ID)
		e.Bool(f.OK)
		e.Str(f.Reason)
	case *Credit:
		e.B = append(e.B, f.Hop)
		e.Uvarint(uint64(f.N))
	case *Consume:
		e.Uvarint(f.Consumer)
		e.Str(f.VHost)
		e.Str(f.Queue)
		e.Uvarint(uint64(f.Prefetch))
		e.Bool(f.PerConsumer)
		e.Bool(f.Args != nil)
		if f.Args != nil {
			e.Table(f.Args)
		}
	case *Qos:
		e.Uvarint(f.Consumer)
		e.Uvarint(uint64(f.Prefetch))
	case *Cancel:
		e.Uvarint(f.Consumer)
	case *Cancelled:
		e.Uvarint(f.Consumer)
		e.Bool(f.Refused)
		e.Str(f.Reason)
	case *Deliver:
		e.Uvarint(f.Consumer)
		e.Uvarint(f.Delivery)
		e.Bool(f.Redelivered)
		e.message(&f.Msg)
	case *Settle:
		e.Uvarint(f.Consumer)
		e.B = append(e.B, byte(f.Op))
		e.deltas(f.Deliveries)
	case *Get:
		e.Uvarint(f.Req)
		e.Str(f.VHost)
		e.Str(f.Queue)
		e.Bool(f.NoAck)
	case *GetOK:
		e.Uvarint(f.Req)
		e.Uvarint(f.Delivery)
		e.Bool(f.Redelivered)
		e.Uvarint(f.Remaining)
		e.message(&f.Msg)
	case *Purge:
		e.Uvarint(f.Req)
		e.Str(f.VHost)
		e.Str(f.Queue)
	case *Count:
		e.Uvarint(f.Req)
		e.Str(f.VHost)
		e.Str(f.Queue)
	case *Result:
		e.Uvarint(f.Req)
		e.Str(f.Err)
		e.Uvarint(f.A)
		e.Uvarint(f.B)
	case *Ping, *Pong:
	default:
		return dst, fmt.Errorf("frame: cannot encode %T", f)
	}
	if err := e.err(); err != nil {
		return dst, err
	}
	n := len(e.B) - start - HeaderSize
	if n > MaxFrame {
		return dst, &Error{Type: f.Type(), Err: ErrTooLarge, Why: fmt.Sprintf("length %d", n)}
	}
	binary.BigEndian.PutUint32(e.B[start:], uint32(n))
	return e.B, nil
}

func (d *dec) hello() *Hello {
	m := d.Raw(uint64(len(Magic)))
	if d.Err == nil && string(m) != Magic {
		d.Fail("bad magic")
	}
	return &Hello{Version: d.Byte()}
}
