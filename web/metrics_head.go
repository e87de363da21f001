package web

import (
	"time"

	"github.com/trident-broker/trident/exchange"
)

// headJSON is a queue's head_message_timestamp (RabbitMQ's meaning: the
// head message's timestamp property, in seconds) and
// head_message_age_seconds (how long it has waited since it was
// enqueued), each null when unknown.
func headJSON(st exchange.QueueStatus, now time.Time) (*int64, *float64) {
	var ts *int64
	var age *float64
	if !st.HeadTimestamp.IsZero() {
		s := st.HeadTimestamp.Unix()
		ts = &s
	}
	if a, ok := headAge(st, now); ok {
		age = &a
	}
	return ts, age
}

// headAge is how long the queue's head message has waited, in seconds.
func headAge(st exchange.QueueStatus, now time.Time) (float64, bool) {
	if st.HeadEnqueued == 0 {
		return 0, false
	}
	return max(float64(now.UnixNano()-st.HeadEnqueued)/1e9, 0), true
}

// streamLags calls fn with each named consumer of stream q and its lag.
func streamLags(q *exchange.Queue, fn func(consumer string, lag int64)) {
	si, ok := q.StreamInfo()
	if !ok {
		return
	}
	for _, c := range si.Consumers {
		fn(c.Name, c.Lag)
	}
}
