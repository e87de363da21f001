package frame

import "github.com/trident-broker/trident/exchange/headers"

// Hello opens a connection (client).
type Hello struct{ Version uint8 }

// Welcome accepts a Hello (server): Credit publishes of each hop may be
// sent before the first Credit frame.
type Welcome struct {
	Version uint8
	Credit  uint32
}

// Refuse turns down a Hello of a version the server does not speak; the
// server closes the connection after it.
type Refuse struct {
	Version uint8 // the version the server speaks
	Reason  string
}

// Publish routes Msg to Queue in VHost on the server's node (client). It
// takes one credit of hop Hop, which is how many times the message was
// forwarded before (0 for one published on the client's node); the server
// sets Hop+1 as the message's hop count. Meta, if not 0, is the metadata
// log index the server must have applied before it routes the message.
type Publish struct {
	ID    uint64
	Hop   uint8
	Meta  uint64
	VHost string
	Queue string
	Msg   Message
}

// Confirm settles Publish ID (server): OK, or refused with a reason.
// Confirms come in any order.
type Confirm struct {
	ID     uint64
	OK     bool
	Reason string
}

// ReasonNotAppended is the Reason of a Confirm that refuses a publish the
// queue's message log never appended (its leader was handing over, or had
// lost its leadership): no member holds it, so the client may send it to
// the queue's next owner. It is a Reason, not a new field or frame, so the
// wire format is unchanged: a node of version 0.1.0 takes it as any other
// refusal (its publisher is nacked, as before).
const ReasonNotAppended = "not appended: the queue's leader is changing"

// Credit grants N more publishes of hop Hop (server).
type Credit struct {
	Hop uint8
	N   uint32
}

// Consume starts consumer Consumer (an id the client chooses, unique on
// the connection) on Queue (client). Prefetch bounds its unsettled
// deliveries (0: unlimited); PerConsumer says it is the consumer's own
// limit (a stream's) rather than a resizable window. Args are its
// consumer arguments (a stream's offset), nil for none.
type Consume struct {
	Consumer    uint64
	VHost       string
	Queue       string
	Prefetch    uint32
	PerConsumer bool
	Args        map[string]any
}

// Qos changes a running consumer's window (client).
type Qos struct {
	Consumer uint64
	Prefetch uint32
}

// Cancel stops a consumer; its unsettled deliveries go back to the queue
// (client).
type Cancel struct{ Consumer uint64 }

// Cancelled says the server ended a consumer (server): its queue went
// away, or, with Refused, Consume failed (no such queue) and the consumer
// never ran.
type Cancelled struct {
	Consumer uint64
	Refused  bool
	Reason   string
}

// Deliver hands a message to a consumer (server). Delivery is its handle
// for Settle, unique per consumer.
type Deliver struct {
	Consumer    uint64
	Delivery    uint64
	Redelivered bool
	Msg         Message
}

// SettleOp is what Settle does.
type SettleOp uint8

// Settle operations.
const (
	Ack SettleOp = iota
	Requeue
	Reject
)

// Settle settles deliveries of a consumer, or of Get when Consumer is 0
// (client). Unknown deliveries are ignored.
type Settle struct {
	Consumer   uint64
	Op         SettleOp
	Deliveries []uint64
}

// Get takes one message from a queue (client); the answer is GetOK or a
// Result (Err empty: the queue is empty).
type Get struct {
	Req   uint64
	VHost string
	Queue string
	NoAck bool
}

// GetOK answers Get with a message (server); Delivery is for Settle with
// Consumer 0 unless the Get was NoAck.
type GetOK struct {
	Req         uint64
	Delivery    uint64
	Redelivered bool
	Remaining   uint64
	Msg         Message
}

// Purge removes a queue's ready messages (client); Result.A is how many.
type Purge struct {
	Req   uint64
	VHost string
	Queue string
}

// Count asks a queue's ready messages (Result.A) and consumers (Result.B)
// (client).
type Count struct {
	Req   uint64
	VHost string
	Queue string
}

// Result answers Get (empty), Purge and Count (server); Err is not empty
// if the call failed.
type Result struct {
	Req  uint64
	Err  string
	A, B uint64
}

// Ping asks for a Pong (client, as a heartbeat).
type Ping struct{}

// Pong answers Ping (server).
type Pong struct{}

// Message is a message as it travels: the core's message fields. Props
// has the core's exchange.Properties layout, so that either converts to
// the other.
type Message struct {
	Exchange   string
	RoutingKey string
	Props      Properties
	Body       []byte
}

// Properties are a message's properties: the headers package's layout,
// which exchange.Properties converts to. Header values are nil, bool, the
// sized integers, int (sent as int64), uint (as uint64), float32, float64,
// string, []byte, time.Time, slices, tables (map[string]any or a named map
// type on it) and decimals (a struct of a uint8 scale and an int32 value);
// they decode as those types, with tables as map[string]any, slices as
// []any and decimals as Decimal.
type Properties = headers.Properties

// Decimal is a decimal table value as decoded.
type Decimal = headers.Decimal

func (*Hello) Type() Type     { return THello }
func (*Welcome) Type() Type   { return TWelcome }
func (*Refuse) Type() Type    { return TRefuse }
func (*Publish) Type() Type   { return TPublish }
func (*Confirm) Type() Type   { return TConfirm }
func (*Credit) Type() Type    { return TCredit }
func (*Consume) Type() Type   { return TConsume }
func (*Qos) Type() Type       { return TQos }
func (*Cancel) Type() Type    { return TCancel }
func (*Cancelled) Type() Type { return TCancelled }
func (*Deliver) Type() Type   { return TDeliver }
func (*Settle) Type() Type    { return TSettle }
func (*Get) Type() Type       { return TGet }
func (*GetOK) Type() Type     { return TGetOK }
func (*Purge) Type() Type     { return TPurge }
func (*Count) Type() Type     { return TCount }
func (*Result) Type() Type    { return TResult }
func (*Ping) Type() Type      { return TPing }
func (*Pong) Type() Type      { return TPong }
