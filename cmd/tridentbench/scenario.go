package main

import (
	"context"
	"sync/atomic"
	"time"
)

// Scenario is one workload, run against one target at a time. A scenario
// speaks one protocol, named by the URL scheme of the targets it runs against
// ("amqp"; MQTT and STOMP scenarios would say "mqtt" and "stomp").
type Scenario interface {
	// Name is the scenario's column in the report, e.g. "amqp-transient-autoack".
	Name() string
	// Scheme is the URL scheme the scenario needs from a target.
	Scheme() string
	// Run declares what it needs on the broker at url (fresh names), runs
	// p.Warmup then measures p.Duration, and removes what it declared.
	Run(ctx context.Context, url string, p Params) (Result, error)
}

// A clusterScenario can also run against a cluster target (--cluster3),
// placing its clients on the cluster's nodes.
type clusterScenario interface {
	Scenario
	// OnCluster says whether the scenario runs against cluster targets.
	OnCluster() bool
	// RunCluster is Run against the nodes of c.
	RunCluster(ctx context.Context, c *localCluster, p Params) (Result, error)
}

// Params are the knobs shared by all scenarios.
type Params struct {
	Duration time.Duration // measured interval
	Warmup   time.Duration // run before the measured interval, not counted
	MsgSize  int           // body size in bytes
	// MaxInFlight bounds published-but-not-yet-consumed messages: the publisher
	// pauses above it so that a slow consumer does not fill the broker's memory.
	MaxInFlight uint64
	// ConfirmWindow bounds unconfirmed publishes per publisher (confirm scenarios).
	ConfirmWindow int
	// Prefetch is the consumer's basic.qos prefetch count (manual-ack scenarios).
	Prefetch int
	// AckEvery acknowledges with multiple=true every AckEvery deliveries.
	AckEvery int
	// LatencyRates are the percentages of saturation at which the raw
	// scenarios measure latency, each for LatencyDuration.
	LatencyRates    []int
	LatencyDuration time.Duration
}

// Result is what one run measured over Params.Duration.
type Result struct {
	// Published counts messages sent, or in confirm scenarios messages the
	// broker confirmed (acked), during the measured interval.
	Published uint64 `json:"published"`
	// Consumed counts messages the consumer received during the interval.
	Consumed uint64 `json:"consumed"`
	// Nacked counts negative publisher confirms during the interval.
	Nacked  uint64        `json:"nacked,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// Placement says where the clients were connected, for cluster targets.
	Placement string `json:"placement,omitempty"`

	PublishRate float64 `json:"published_per_sec"`
	ConsumeRate float64 `json:"consumed_per_sec"`

	// Raw holds the raw scenarios' CPU and latency figures.
	Raw *RawStats `json:"raw,omitempty"`
}

// counters are written by the publisher, confirm and consumer goroutines and
// read by measure. Each sits on its own cache line: the hot loops must not
// bounce a shared line between cores on every message.
type counters struct {
	published atomic.Uint64
	_         [56]byte
	consumed  atomic.Uint64
	_         [56]byte
	nacked    atomic.Uint64
	_         [56]byte
	// sent is what the publishers of a multi-publisher scenario have sent,
	// added in batches, for their MaxInFlight check.
	sent atomic.Uint64
	_    [56]byte
	stop atomic.Bool
}

func (c *counters) snapshot() (pub, con, nack uint64, at time.Time) {
	return c.published.Load(), c.consumed.Load(), c.nacked.Load(), time.Now()
}

// fail records the first error of a worker goroutine unless the run is
// already stopping (errors after stop are the expected result of closing).
func (c *counters) fail(errc chan<- error, err error) {
	if err == nil || c.stop.Load() {
		return
	}
	select {
	case errc <- err:
	default:
	}
}

// measure lets the workers run for p.Warmup, then counts over p.Duration.
// It returns early with the first worker error or when ctx ends.
func measure(ctx context.Context, c *counters, p Params, errc <-chan error) (Result, error) {
	return measureWith(ctx, c, p, errc, func() {}, func() {})
}

// measureWith is measure calling begin and end around the measured interval.
func measureWith(ctx context.Context, c *counters, p Params, errc <-chan error, begin, end func()) (Result, error) {
	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case err := <-errc:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := wait(p.Warmup); err != nil {
		return Result{}, err
	}
	begin()
	p0, c0, n0, t0 := c.snapshot()
	if err := wait(p.Duration); err != nil {
		return Result{}, err
	}
	p1, c1, n1, t1 := c.snapshot()
	end()
	r := Result{Published: p1 - p0, Consumed: c1 - c0, Nacked: n1 - n0, Elapsed: t1.Sub(t0)}
	secs := r.Elapsed.Seconds()
	r.PublishRate = float64(r.Published) / secs
	r.ConsumeRate = float64(r.Consumed) / secs
	return r, nil
}
