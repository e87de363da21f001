package jepsen

import (
	"context"
	"errors"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Config describes a workload for Run. Zero fields take the values of
// Default.
type Config struct {
	// Addrs are the AMQP URLs of the nodes (amqp://user:pass@host:port/).
	// Clients pick a node round-robin and move to the next one when a
	// connection fails.
	Addrs []string
	// Queue is declared durable with QueueArgs on the first node that
	// accepts it, and used by every publisher and consumer.
	Queue     string
	QueueArgs amqp.Table // e.g. amqp.Table{"x-queue-type": "quorum"}

	Publishers int
	Consumers  int
	// Duration is how long the nemesis runs and publishers publish.
	Duration time.Duration
	// Rate is messages per second per publisher; 0 means as fast as
	// confirms allow, with at most InFlight unconfirmed messages.
	Rate     float64
	InFlight int
	// Prefetch is the consumers' basic.qos prefetch count.
	Prefetch int

	// Nemesis, if set, is called when the clients have started, with a ctx
	// that ends after Duration: it injects faults (kill, restart,
	// partition) and records each as an Event. It must return soon after
	// ctx is done. The clients run concurrently in their own goroutines.
	Nemesis func(ctx context.Context, record func(Event))
	// Heal, if set, is called once after Nemesis has returned and before
	// the publishers stop. It must leave every node running and reachable
	// (restart what is down, heal partitions), recording what it does. An
	// error is returned by Run, after the drain.
	Heal func(ctx context.Context, record func(Event)) error

	// Backoff is the pause before a client reconnects.
	Backoff time.Duration
	// DialTimeout bounds a TCP connect; Heartbeat is the AMQP heartbeat
	// (it detects dead peers behind a partition).
	DialTimeout time.Duration
	Heartbeat   time.Duration
	// DeclareTimeout bounds the retries of the queue declaration.
	DeclareTimeout time.Duration
	// ConfirmTimeout is how long a stopping publisher waits for its
	// outstanding confirms; what is still unconfirmed is indeterminate.
	ConfirmTimeout time.Duration
	// The final drain ends when every consumer is consuming, no delivery
	// has arrived for DrainQuiet and the queue reports no ready message;
	// Run gives up with ErrDrainTimeout after DrainTimeout.
	DrainQuiet   time.Duration
	DrainTimeout time.Duration

	// Logger receives progress and connection errors. Nil discards.
	Logger *slog.Logger
}

// Default returns the defaults of every optional field.
func Default() Config {
	return Config{
		Publishers:     2,
		Consumers:      2,
		Duration:       20 * time.Second,
		InFlight:       64,
		Prefetch:       32,
		Backoff:        200 * time.Millisecond,
		DialTimeout:    2 * time.Second,
		Heartbeat:      5 * time.Second,
		DeclareTimeout: 30 * time.Second,
		ConfirmTimeout: 10 * time.Second,
		DrainQuiet:     3 * time.Second,
		DrainTimeout:   2 * time.Minute,
	}
}

// Errors of Validate and Run.
var (
	// ErrConfig is wrapped by Validate's errors.
	ErrConfig = errors.New("jepsen: invalid config")
	// ErrDeclare means no node accepted the queue declaration within
	// DeclareTimeout.
	ErrDeclare = errors.New("jepsen: could not declare the queue")
	// ErrDrainTimeout means the queue did not drain within DrainTimeout;
	// the history has no Drained operation.
	ErrDrainTimeout = errors.New("jepsen: the queue did not drain")
)

// withDefaults fills zero fields from Default.
func (c Config) withDefaults() Config {
	d := Default()
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.Publishers, d.Publishers)
	setInt(&c.Consumers, d.Consumers)
	setInt(&c.InFlight, d.InFlight)
	setInt(&c.Prefetch, d.Prefetch)
	setDur(&c.Duration, d.Duration)
	setDur(&c.Backoff, d.Backoff)
	setDur(&c.DialTimeout, d.DialTimeout)
	setDur(&c.Heartbeat, d.Heartbeat)
	setDur(&c.DeclareTimeout, d.DeclareTimeout)
	setDur(&c.ConfirmTimeout, d.ConfirmTimeout)
	setDur(&c.DrainQuiet, d.DrainQuiet)
	setDur(&c.DrainTimeout, d.DrainTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports a config Run cannot use.
func (c Config) Validate() error {
	switch {
	case len(c.Addrs) == 0:
		return errors.Join(ErrConfig, errors.New("no Addrs"))
	case c.Queue == "":
		return errors.Join(ErrConfig, errors.New("no Queue"))
	case c.Publishers < 0 || c.Consumers <= 0:
		return errors.Join(ErrConfig, errors.New("need at least one consumer and no negative counts"))
	case c.Rate < 0 || c.InFlight < 0 || c.Prefetch < 0 || c.Duration < 0:
		return errors.Join(ErrConfig, errors.New("negative Rate, InFlight, Prefetch or Duration"))
	}
	return nil
}
