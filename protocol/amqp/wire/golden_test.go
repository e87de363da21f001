package wire

import (
	"bytes"
	"time"
)

// cat concatenates byte slices and strings into one byte slice.
func cat(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			b = append(b, p...)
		case []byte:
			b = append(b, p...)
		case byte:
			b = append(b, p)
		case int:
			b = append(b, byte(p))
		case rune:
			b = append(b, byte(p))
		default:
			panic("cat: bad part")
		}
	}
	return b
}

// goldenMethods are method frame payloads built by hand from the
// specification, with the method each decodes to. Tables have one entry so
// that the encoding is deterministic.
var goldenMethods = []struct {
	name    string
	payload []byte
	method  Method
}{
	{
		name: "connection.start-ok",
		payload: cat(0, 10, 0, 11,
			0, 0, 0, 17, 7, "product", 'S', 0, 0, 0, 4, "test", // client-properties
			5, "PLAIN", // mechanism
			0, 0, 0, 12, "\x00guest\x00guest", // response
			5, "en_US"), // locale
		method: &ConnectionStartOK{
			ClientProperties: Table{"product": "test"},
			Mechanism:        "PLAIN",
			Response:         "\x00guest\x00guest",
			Locale:           "en_US",
		},
	},
	{
		name: "connection.tune",
		payload: cat(0, 10, 0, 30,
			0x07, 0xff, // channel-max 2047
			0, 2, 0, 0, // frame-max 131072
			0, 60), // heartbeat
		method: &ConnectionTune{ChannelMax: 2047, FrameMax: 131072, Heartbeat: 60},
	},
	{
		name:    "connection.open",
		payload: cat(0, 10, 0, 40, 1, "/", 0, 0),
		method:  &ConnectionOpen{VirtualHost: "/"},
	},
	{
		name: "connection.close",
		payload: cat(0, 10, 0, 50, 0x01, 0xf8, // 504
			11, "CHANNEL_ERR", 0, 60, 0, 40),
		method: &ConnectionClose{ReplyCode: ChannelError, ReplyText: "CHANNEL_ERR", ReplyClassID: 60, ReplyMethodID: 40},
	},
	{
		name: "queue.declare",
		payload: cat(0, 50, 0, 10,
			0, 0, // reserved-1
			5, "tasks",
			0x02|0x10, // durable, no-wait
			0, 0, 0, 22, 12, "x-max-length", 'l', 0, 0, 0, 0, 0, 0, 0x03, 0xe8),
		method: &QueueDeclare{Queue: "tasks", Durable: true, NoWait: true, Arguments: Table{"x-max-length": int64(1000)}},
	},
	{
		name:    "basic.qos",
		payload: cat(0, 60, 0, 10, 0, 0, 0, 0, 0, 10, 1),
		method:  &BasicQos{PrefetchCount: 10, Global: true},
	},
	{
		name: "basic.publish",
		payload: cat(0, 60, 0, 40,
			0, 0, // reserved-1
			10, "amq.direct",
			3, "key",
			0x01), // mandatory
		method: &BasicPublish{Exchange: "amq.direct", RoutingKey: "key", Mandatory: true},
	},
	{
		name: "basic.deliver",
		payload: cat(0, 60, 0, 60,
			6, "ctag-1",
			0, 0, 0, 0, 0, 0, 0, 42, // delivery-tag
			0x01, // redelivered
			0,    // exchange ""
			5, "hello"),
		method: &BasicDeliver{ConsumerTag: "ctag-1", DeliveryTag: 42, Redelivered: true, RoutingKey: "hello"},
	},
	{
		name:    "basic.nack",
		payload: cat(0, 60, 0, 120, 0, 0, 0, 0, 0, 0, 1, 0, 0x03),
		method:  &BasicNack{DeliveryTag: 256, Multiple: true, Requeue: true},
	},
	{
		name:    "confirm.select",
		payload: cat(0, 85, 0, 10, 0x01),
		method:  &ConfirmSelect{NoWait: true},
	},
	{
		name:    "channel.open-ok",
		payload: cat(0, 20, 0, 11, 0, 0, 0, 0),
		method:  &ChannelOpenOK{},
	},
}

var goldenTimestamp = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// goldenHeaders are content header frame payloads built by hand.
var goldenHeaders = []struct {
	name     string
	payload  []byte
	classID  uint16
	bodySize uint64
	props    Properties
}{
	{
		name: "text with headers",
		payload: cat(0, 60, 0, 0, // class, weight
			0, 0, 0, 0, 0, 0, 0, 5, // body size
			0xb0, 0x40, // content-type, headers, delivery-mode, timestamp
			10, "text/plain",
			0, 0, 0, 8, 1, "k", 'S', 0, 0, 0, 1, "v",
			2,
			0, 0, 0, 0, 0x65, 0x93, 0x7d, 0x25), // 2024-01-02T03:04:05Z
		classID:  ClassBasic,
		bodySize: 5,
		props: Properties{
			Flags:        FlagContentType | FlagHeaders | FlagDeliveryMode | FlagTimestamp,
			ContentType:  "text/plain",
			Headers:      Table{"k": "v"},
			DeliveryMode: 2,
			Timestamp:    goldenTimestamp,
		},
	},
	{
		name:     "no properties",
		payload:  cat(0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0, 0),
		classID:  ClassBasic,
		bodySize: 256,
		props:    Properties{},
	},
	{
		name: "all strings",
		payload: cat(0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			0x07, 0xbc, // correlation-id reply-to expiration message-id type user-id app-id cluster-id
			1, "c", 1, "r", 1, "e", 1, "m", 1, "t", 1, "u", 1, "a", 0),
		classID: ClassBasic,
		props: Properties{
			Flags:         FlagCorrelationID | FlagReplyTo | FlagExpiration | FlagMessageID | FlagType | FlagUserID | FlagAppID | FlagClusterID,
			CorrelationID: "c", ReplyTo: "r", Expiration: "e", MessageID: "m", Type: "t", UserID: "u", AppID: "a",
		},
	},
}

// goldenFrames are whole frames as they appear on the wire.
var goldenFrames = [][]byte{
	cat(FrameMethod, 0, 1, 0, 0, 0, 22, goldenMethods[6].payload, FrameEnd),
	cat(FrameHeader, 0, 1, 0, 0, 0, 14, goldenHeaders[1].payload, FrameEnd),
	cat(FrameBody, 0, 1, 0, 0, 0, 5, "hello", FrameEnd),
	cat(FrameHeartbeat, 0, 0, 0, 0, 0, 0, FrameEnd),
}

// goldenTables are encoded field tables (with length prefix) that hold one
// entry, or none.
var goldenTables = [][]byte{
	cat(0, 0, 0, 0),
	goldenMethods[0].payload[4 : 4+21],
	cat(0, 0, 0, 20, 1, "a", 'A', 0, 0, 0, 13, 't', 1, 'b', 0xff, 'V', 'F', 0, 0, 0, 3, 1, "z", 'V'),
	cat(0, 0, 0, 8, 1, "d", 'D', 2, 0, 0, 0x30, 0x39),
	cat(0, 0, 0, 10, 1, "x", 'x', 0, 0, 0, 3, 0, 1, 0xff),
}

func init() {
	// Sanity check of the hand-built frames (lengths typed by hand).
	for _, f := range goldenFrames {
		if n := int(f[6]) + 8; n != len(f) || !bytes.Equal(f[len(f)-1:], []byte{FrameEnd}) {
			panic("bad golden frame")
		}
	}
}
