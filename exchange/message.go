package exchange

import (
	"github.com/trident-broker/trident/exchange/streamlog"
	"sync/atomic"
	"time"
)

// Table is a header or argument table. Values are Go values: bool, int8..int64,
// uint8..uint64, float32, float64, string, []byte, time.Time, []any,
// map[string]any (or a named map type with that underlying type), nil.
type Table = map[string]any

// Properties are a message's properties, as AMQP 0-9-1 defines them; the MQTT
// and STOMP front ends map theirs onto these. A zero value means "absent".
type Properties struct {
	ContentType     string
	ContentEncoding string
	Headers         Table
	DeliveryMode    uint8 // 2 = persistent
	Priority        uint8
	CorrelationID   string
	ReplyTo         string
	Expiration      string // milliseconds, as a decimal string
	MessageID       string
	Timestamp       time.Time
	Type            string
	UserID          string
	AppID           string
}

// Persistent reports whether the message asks to be stored.
func (p *Properties) Persistent() bool { return p.DeliveryMode == 2 }

// Message is one message as the core sees it. A Message is immutable once
// published: the core shares one *Message between every queue it is routed
// to, and front ends must not modify a delivered Message.
type Message struct {
	Exchange   string
	RoutingKey string
	Props      Properties
	Body       []byte

	// Hops is how many times another node forwarded the message before
	// it reached this one (cluster/forward): 0 for a message published
	// here. A proxy forwards it only while Hops is below the forwarder's
	// limit, so a message can never circle between nodes whose views of
	// a queue's home disagree for a moment.
	Hops uint8

	// ts is when the core accepted the message (unix nanoseconds).
	ts int64
	// expiresAt is the per-message expiry (unix nanoseconds), 0 if none.
	// Set by the core when it accepts the message.
	expiresAt int64
	// enc is the front ends' cache of the message's encodings
	// (encoding.go), a list that only grows.
	enc encodings

	// Reuse (reuse.go): rec takes m back once holds drops to 0; held is
	// how many queues took a hold during Publish (its goroutine only; at
	// most maxHeld); prepaid is how many holds Publish added at once for
	// the queues of a fan-out that have not taken theirs yet (its
	// goroutine only).
	rec     Recycler
	holds   atomic.Int32
	held    uint8
	prepaid uint8

	// writer is the named stream producer and publishing id the message
	// carries (SetStreamWriter, streamwriter.go), nil for every other.
	writer *streamlog.Writer
}

// ExpiresAt is when the message's own expiration (Props.Expiration, set
// when the core accepted it) passes, in unix nanoseconds; 0 if it has none.
// Front ends use it to pass on the remaining lifetime (MQTT 5's message
// expiry interval) rather than the original one.
func (m *Message) ExpiresAt() int64 { return m.expiresAt }

// Size is the body size in bytes, the unit of x-max-length-bytes.
func (m *Message) Size() int { return len(m.Body) }
