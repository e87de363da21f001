package exchange

import (
	"fmt"
	"github.com/trident-broker/trident/exchange/sched"
	"strconv"
	"strings"
	"time"
)

// Queue settings of issue 13 (scheduling and redrive), as x-arguments and
// policy keys:
//
//	x-consumer-timeout / consumer-timeout  ms an unacknowledged delivery
//	    may stay so (RabbitMQ's); the lower of the two wins, as RabbitMQ
//	    combines them. The node default (conf consumer_timeout) applies
//	    when neither is set; the front ends enforce it.
//	x-retry-delays / retry-delays  the back-off of a message that a
//	    consumer rejects without requeue (retry.go), e.g. "1s,2s,4s"; the
//	    x-argument wins when both are set.
const (
	argConsumerTimeout = "x-consumer-timeout"
	argRetryDelays     = "x-retry-delays"
	polConsumerTimeout = "consumer-timeout"
	polRetryDelays     = "retry-delays"

	// maxRetryDelays bounds the list (each retry is one more entry of a
	// message's x-death history).
	maxRetryDelays = 64
)

// schedArgs are a queue's parsed scheduling settings; the zero value is
// none, and it is comparable (queueArgs are compared).
type schedArgs struct {
	consumerTimeout int64  // ms, 0 none
	retry           string // canonical retry delays ("1s,2s,4s"), "" none
}

func parseSchedArgs(args Table) (schedArgs, error) {
	var s schedArgs
	if v, ok := args[argConsumerTimeout]; ok {
		n, ok := asInt64(v)
		if _, isStr := v.(string); isStr || !ok || n < 1 {
			return s, errorf(KindPreconditionFailed, "invalid arg '%s' for queue: %v of type %T is not a positive integer", argConsumerTimeout, v, v)
		}
		s.consumerTimeout = n
	}
	if v, ok := args[argRetryDelays]; ok {
		d, err := parseRetryDelays(v)
		if err != nil {
			return s, errorf(KindPreconditionFailed, "invalid arg '%s' for queue: %v", argRetryDelays, err)
		}
		s.retry = formatRetryDelays(d)
	}
	return s, nil
}

func formatRetryDelays(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// parseRetryDelays reads a list of delays: a string of comma-separated
// durations ("1s,2s,4s"; a bare number is milliseconds) or an array of
// them (numbers are milliseconds).
func parseRetryDelays(v any) ([]time.Duration, error) {
	var parts []any
	switch x := v.(type) {
	case string:
		for _, p := range strings.Split(x, ",") {
			parts = append(parts, strings.TrimSpace(p))
		}
	case []byte:
		return parseRetryDelays(string(x))
	case []any:
		parts = x
	default:
		return nil, fmt.Errorf("%v of type %T is not a list of delays such as \"1s,2s,4s\"", v, v)
	}
	if len(parts) == 0 || len(parts) > maxRetryDelays {
		return nil, fmt.Errorf("%v: between 1 and %d delays, such as \"1s,2s,4s\"", v, maxRetryDelays)
	}
	out := make([]time.Duration, 0, len(parts))
	for _, p := range parts {
		var d time.Duration
		switch x := p.(type) {
		case string:
			if n, err := strconv.ParseInt(x, 10, 64); err == nil {
				d = time.Duration(n) * time.Millisecond
			} else if d, err = time.ParseDuration(x); err != nil {
				return nil, fmt.Errorf("'%s' is not a delay such as \"2s\" or \"500ms\"", x)
			}
		default:
			n, ok := asInt64(p)
			if !ok {
				return nil, fmt.Errorf("%v of type %T is not a delay", p, p)
			}
			d = time.Duration(n) * time.Millisecond
		}
		if d < time.Millisecond || d > sched.MaxDelay*time.Millisecond {
			return nil, fmt.Errorf("delay %v is not between 1ms and %v", d, sched.MaxDelay*time.Millisecond)
		}
		out = append(out, d)
	}
	return out, nil
}

// validateSchedKey checks a policy definition's scheduling key; handled is
// false for other keys.
func validateSchedKey(k string, val any) (handled bool, err error) {
	switch k {
	case polConsumerTimeout:
		n, ok := asInt64(val)
		if _, isStr := val.(string); isStr || !ok || n < 1 {
			return true, errorf(KindPreconditionFailed, "%s must be a positive integer (ms), got %v", k, val)
		}
		return true, nil
	case polRetryDelays:
		if _, err := parseRetryDelays(val); err != nil {
			return true, errorf(KindPreconditionFailed, "invalid %s: %v", k, err)
		}
		return true, nil
	}
	return false, nil
}

// withSchedPolicy combines a queue's own scheduling settings with a
// policy definition d (nil: none).
func withSchedPolicy(xa schedArgs, d Table) schedArgs {
	a := xa
	if d == nil {
		return a
	}
	if n, ok := asInt64(d[polConsumerTimeout]); ok && n > 0 && (a.consumerTimeout == 0 || n < a.consumerTimeout) {
		a.consumerTimeout = n
	}
	if a.retry == "" {
		if v, ok := d[polRetryDelays]; ok {
			if ds, err := parseRetryDelays(v); err == nil {
				a.retry = formatRetryDelays(ds)
			}
		}
	}
	return a
}

// syncSchedLocked publishes q's effective scheduling settings to readers
// without q.mu (front ends, per delivery). q.mu is held, or q is new.
func (q *Queue) syncSchedLocked() {
	sa := q.a.sched
	if sa.consumerTimeout == 0 && sa.retry == "" {
		q.sched.Store(nil) // none: nothing of its own for every queue
		return
	}
	s := &queueSched{ctimeout: sa.consumerTimeout}
	if sa.retry != "" {
		s.retry, _ = parseRetryDelays(sa.retry)
	}
	q.sched.Store(s)
}

// queueSched is what syncSchedLocked publishes: the consumer timeout in
// ms (0: none) and the retry delays (nil: none).
type queueSched struct {
	ctimeout int64
	retry    []time.Duration
}

// ConsumerTimeout is how long a delivery from q may stay unacknowledged,
// from its x-consumer-timeout or policy; ok is false when neither sets one
// (the node's default applies).
func (q *Queue) ConsumerTimeout() (d time.Duration, ok bool) {
	var n int64
	if s := q.sched.Load(); s != nil {
		n = s.ctimeout
	}
	if n <= 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// RetryDelays is q's effective retry back-off (nil: none).
func (q *Queue) RetryDelays() []time.Duration {
	if s := q.sched.Load(); s != nil {
		return s.retry
	}
	return nil
}
