package exchange

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Stream arguments, as RabbitMQ (3.9+) defines them for x-queue-type
// stream. Texts of the errors follow RabbitMQ 3.10's, word for word where
// RabbitMQ answers with a 406 at all.

// defaultSegmentBytes is RabbitMQ's default x-stream-max-segment-size-bytes.
const defaultSegmentBytes = 500_000_000

// streamArgs are a stream's parsed x-arguments.
type streamArgs struct {
	maxAge      time.Duration // x-max-age, 0 none
	maxBytes    int64         // x-max-length-bytes, 0 none
	segBytes    int64         // x-stream-max-segment-size-bytes
	clusterSize int           // x-initial-cluster-size, 0 default
}

// streamRefusedArgs are queue arguments a stream refuses (RabbitMQ: "of
// queue type rabbit_stream_queue"). Unknown arguments pass, as there.
var streamRefusedArgs = []string{
	"x-message-ttl", "x-expires", "x-max-length", "x-overflow", "x-dead-letter-exchange",
	"x-dead-letter-routing-key", "x-max-priority", "x-single-active-consumer", "x-delivery-limit",
	"x-quorum-initial-group-size", "x-queue-mode", "x-max-in-memory-length", "x-max-in-memory-bytes",
	argRetryDelays,
}

// argError is a queue argument refused before the queue's name is known
// to the parser; declareQueueLocked names the queue (namedArgError).
type argError struct {
	arg    string
	reason string // RabbitMQ's reason term, "" for "of queue type ..."
}

func (e *argError) Error() string { return "exchange: invalid arg '" + e.arg + "'" }

// namedArgError turns an *argError into RabbitMQ's 406 text for queue
// name in vhost vh; other errors pass unchanged.
func namedArgError(err error, name, vh string) error {
	e, ok := err.(*argError)
	if !ok {
		return err
	}
	if e.reason == "" {
		return errorf(KindPreconditionFailed, "invalid arg '%s' for queue '%s' in vhost '%s' of queue type rabbit_stream_queue", e.arg, name, vh)
	}
	return errorf(KindPreconditionFailed, "invalid arg '%s' for queue '%s' in vhost '%s': %s", e.arg, name, vh, e.reason)
}

// isStreamArgs reports whether a declaration asks for a stream.
func isStreamArgs(args Table) bool {
	s, _ := args["x-queue-type"].(string)
	return s == "stream"
}

// parseStreamArgs parses a stream's arguments.
func parseStreamArgs(args Table) (streamArgs, error) {
	a := streamArgs{segBytes: defaultSegmentBytes}
	for _, k := range streamRefusedArgs {
		if _, ok := args[k]; ok {
			return a, &argError{arg: k}
		}
	}
	posInt := func(name string, zeroOK bool) (int64, bool, error) {
		v, ok := args[name]
		if !ok {
			return 0, false, nil
		}
		n, isInt := asInt64(v)
		if _, f := v.(float64); f || !isInt {
			return 0, false, &argError{arg: name, reason: fmt.Sprintf("\"expected integer, got %s\"", amqpTypeName(v))}
		}
		switch {
		case n < 0:
			return 0, false, &argError{arg: name, reason: fmt.Sprintf("{value_negative,%d}", n)}
		case n == 0 && !zeroOK:
			return 0, false, &argError{arg: name, reason: "{value_zero,0}"}
		}
		return n, true, nil
	}
	if n, ok, err := posInt("x-max-length-bytes", true); err != nil {
		return a, err
	} else if ok {
		a.maxBytes = n
	}
	if n, ok, err := posInt("x-stream-max-segment-size-bytes", false); err != nil {
		return a, err
	} else if ok {
		a.segBytes = n
	}
	if n, ok, err := posInt("x-initial-cluster-size", false); err != nil {
		return a, err
	} else if ok {
		a.clusterSize = int(min(n, 1<<10))
	}
	if v, ok := args["x-max-age"]; ok {
		s, isStr := v.(string)
		if !isStr {
			return a, &argError{arg: "x-max-age", reason: fmt.Sprintf("{unacceptable_type,%s}", amqpTypeName(v))}
		}
		d, ok := parseStreamDuration(s)
		if !ok || d <= 0 {
			return a, &argError{arg: "x-max-age", reason: "invalid_max_age"}
		}
		a.maxAge = d
	}
	return a, nil
}

// parseStreamDuration parses RabbitMQ's duration strings: a whole number
// and one unit of Y (365 days), M (30 days), D, h, m or s ("7D", "10s").
func parseStreamDuration(s string) (time.Duration, bool) {
	if len(s) < 2 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:len(s)-1], 10, 32)
	if err != nil || s[0] == '+' {
		return 0, false
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'Y':
		unit = 365 * 24 * time.Hour
	case 'M':
		unit = 30 * 24 * time.Hour
	case 'D':
		unit = 24 * time.Hour
	case 'h':
		unit = time.Hour
	case 'm':
		unit = time.Minute
	case 's':
		unit = time.Second
	default:
		return 0, false
	}
	if n > uint64(math.MaxInt64/unit) {
		// Past what a Duration holds (about 292 years): as long as
		// one can be, so "70000Y" still reaches the beginning (RabbitMQ's
		// arithmetic has no bound) and does not wrap into the future.
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(n) * unit, true
}

// amqpTypeName names v's AMQP field type as RabbitMQ's error terms do.
func amqpTypeName(v any) string {
	switch v.(type) {
	case string:
		return "longstr"
	case []byte:
		return "binary"
	case int8:
		return "byte"
	case uint8:
		return "unsignedbyte"
	case int16:
		return "short"
	case uint16:
		return "unsignedshort"
	case int32:
		return "signedint"
	case uint32:
		return "unsignedint"
	case int64, int, uint64, uint:
		return "long"
	case float32:
		return "float"
	case float64:
		return "double"
	case bool:
		return "bool"
	case time.Time:
		return "timestamp"
	case []any:
		return "array"
	case nil:
		return "void"
	}
	return "table"
}

// Offset specifications (x-stream-offset).
type offsetKind uint8

const (
	offsetNext offsetKind = iota // the default: only messages published from now on
	offsetFirst
	offsetLast
	offsetAt   // a number
	offsetTime // a point in time (timestamp or interval back from now)
)

// offsetSpec is a parsed x-stream-offset.
type offsetSpec struct {
	kind offsetKind
	n    uint64 // offsetAt
	t    int64  // offsetTime: unix ns
}

// parseOffsetSpec parses an x-stream-offset value (v nil: absent, next).
// now is the current time (unix ns), for intervals. A bad value is an
// *argError naming x-stream-offset, in RabbitMQ's
// {invalid_stream_offset_arg,{Type,Value}} form.
func parseOffsetSpec(v any, now int64) (offsetSpec, bool, error) {
	if v == nil {
		return offsetSpec{kind: offsetNext}, false, nil
	}
	bad := func() (offsetSpec, bool, error) {
		val := fmt.Sprint(v)
		if s, ok := v.(string); ok {
			val = "<<" + strconv.Quote(s) + ">>"
		}
		return offsetSpec{}, false, &argError{arg: "x-stream-offset",
			reason: fmt.Sprintf("{invalid_stream_offset_arg,{%s,%s}}", amqpTypeName(v), val)}
	}
	switch x := v.(type) {
	case string:
		switch x {
		case "first":
			return offsetSpec{kind: offsetFirst}, true, nil
		case "last":
			return offsetSpec{kind: offsetLast}, true, nil
		case "next":
			return offsetSpec{kind: offsetNext}, true, nil
		}
		d, ok := parseStreamDuration(x)
		if !ok {
			return bad()
		}
		return offsetSpec{kind: offsetTime, t: now - int64(d)}, true, nil
	case time.Time:
		return offsetSpec{kind: offsetTime, t: x.UnixNano()}, true, nil
	case float32, float64, bool:
		return bad()
	}
	n, ok := asInt64(v)
	if !ok || n < 0 {
		return bad()
	}
	return offsetSpec{kind: offsetAt, n: uint64(n)}, true, nil
}
