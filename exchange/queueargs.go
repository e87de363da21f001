package exchange

import (
	"strconv"
)

// Overflow behaviours (x-overflow).
const (
	OverflowDropHead         = "drop-head"
	OverflowRejectPublish    = "reject-publish"
	OverflowRejectPublishDLX = "reject-publish-dlx"
)

// queueArgs are a queue's parsed x-arguments.
//
// Its flags sit together (a Queue holds two queueArgs, and padding after
// each flag would take it past a size class).
type queueArgs struct {
	messageTTL  int64 // ms, -1 none
	expires     int64 // ms, 0 none
	maxLen      int64 // -1 none
	maxLenBytes int64 // -1 none
	overflow    string
	dlx         string
	dlrk        string
	hasDLX      bool
	hasDLRK     bool
	sac         bool
	quorum      bool // x-queue-type quorum
	stream      bool // x-queue-type stream (stream.go)
	maxPriority int

	deliveryLimit int64 // x-delivery-limit, -1 none
	groupSize     int   // x-quorum-initial-group-size, 0 default

	// The in-memory window (page.go): x-max-in-memory-length and
	// x-max-in-memory-bytes (x-queue-mode lazy is a length of 0), -1 for
	// the node's default.
	memLen, memBytes int64

	sched schedArgs // consumer timeout, retry delays (schedargs.go)

	streamA streamArgs // a stream's arguments
}

func parseQueueArgs(args Table) (queueArgs, error) {
	a := queueArgs{messageTTL: -1, maxLen: -1, maxLenBytes: -1, overflow: OverflowDropHead, deliveryLimit: -1, memLen: -1, memBytes: -1}
	if isStreamArgs(args) {
		var err error
		a.stream = true
		a.streamA, err = parseStreamArgs(args)
		return a, err
	}
	intArg := func(name string, min int64) (int64, bool, error) {
		v, ok := args[name]
		if !ok {
			return 0, false, nil
		}
		n, ok := asInt64(v)
		if _, isStr := v.(string); isStr || !ok {
			return 0, false, errorf(KindPreconditionFailed, "invalid arg '%s' for queue: %v of type %T is not a number", name, v, v)
		}
		if n < min {
			return 0, false, errorf(KindPreconditionFailed, "invalid arg '%s' for queue: %d must be at least %d", name, n, min)
		}
		return n, true, nil
	}
	var err error
	var ok bool
	var n int64
	if n, ok, err = intArg("x-message-ttl", 0); err != nil {
		return a, err
	} else if ok {
		a.messageTTL = n
	}
	if n, ok, err = intArg("x-expires", 1); err != nil {
		return a, err
	} else if ok {
		a.expires = n
	}
	if n, ok, err = intArg("x-max-length", 0); err != nil {
		return a, err
	} else if ok {
		a.maxLen = n
	}
	if n, ok, err = intArg("x-max-length-bytes", 0); err != nil {
		return a, err
	} else if ok {
		a.maxLenBytes = n
	}
	if n, ok, err = intArg("x-max-priority", 0); err != nil {
		return a, err
	} else if ok {
		if n > 255 {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-max-priority' for queue: %d is above 255", n)
		}
		a.maxPriority = int(n)
	}
	if v, ok := args["x-overflow"]; ok {
		s, _ := v.(string)
		switch s {
		case OverflowDropHead, OverflowRejectPublish, OverflowRejectPublishDLX:
			a.overflow = s
		default:
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-overflow' for queue: %v", v)
		}
	}
	if v, ok := args["x-dead-letter-exchange"]; ok {
		s, isStr := v.(string)
		if !isStr {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-dead-letter-exchange' for queue: %v is not a string", v)
		}
		a.dlx, a.hasDLX = s, true
	}
	if v, ok := args["x-dead-letter-routing-key"]; ok {
		s, isStr := v.(string)
		if !isStr {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-dead-letter-routing-key' for queue: %v is not a string", v)
		}
		if !a.hasDLX {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-dead-letter-routing-key' for queue: x-dead-letter-exchange is not set")
		}
		a.dlrk, a.hasDLRK = s, true
	}
	if v, ok := args["x-single-active-consumer"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-single-active-consumer' for queue: %v is not a boolean", v)
		}
		a.sac = b
	}
	if v, ok := args["x-queue-type"]; ok {
		s, _ := v.(string)
		switch s {
		case "classic", "":
		case "quorum":
			a.quorum = true
		default:
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-queue-type' for queue: '%v' is not supported by this node", v)
		}
	}
	if n, ok, err = intArg("x-delivery-limit", 0); err != nil {
		return a, err
	} else if ok {
		a.deliveryLimit = n
	}
	if n, ok, err = intArg("x-max-in-memory-length", 0); err != nil {
		return a, err
	} else if ok {
		a.memLen = n
	}
	if n, ok, err = intArg("x-max-in-memory-bytes", 0); err != nil {
		return a, err
	} else if ok {
		a.memBytes = n
	}
	if v, ok := args["x-queue-mode"]; ok {
		switch v {
		case "lazy":
			a.memLen = 0
		case "default":
		default:
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-queue-mode' for queue: %v", v)
		}
	}
	if n, ok, err = intArg("x-quorum-initial-group-size", 1); err != nil {
		return a, err
	} else if ok {
		a.groupSize = int(min(n, 1<<10))
	}
	if a.sched, err = parseSchedArgs(args); err != nil {
		return a, err
	}
	return a, nil
}

func parseExpiration(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
