package jepsen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// workload is the state shared by the clients of one Run.
type workload struct {
	cfg Config
	rec *Recorder
	log *slog.Logger

	consuming    atomic.Int32 // consumers with a live basic.consume
	lastActivity atomic.Int64 // unix nanos of the last delivery or consumer (re)start
}

// Run executes the workload described by cfg and returns its history:
//
//  1. declare cfg.Queue (durable, cfg.QueueArgs) on the first node that
//     accepts it, retrying for DeclareTimeout;
//  2. start the consumers and publishers, and the nemesis for Duration;
//  3. wait for the nemesis to return, then call Heal;
//  4. stop the publishers (each waits up to ConfirmTimeout for its
//     outstanding confirms);
//  5. drain: wait until every consumer is consuming, nothing has been
//     delivered for DrainQuiet and the queue has no ready message, then
//     record Drained;
//  6. stop the consumers.
//
// The history is returned even with an error (ErrDeclare, ErrDrainTimeout,
// Heal's error, or ctx's). Run knows nothing of how nodes are started or
// killed: that is the business of Nemesis and Heal.
func Run(ctx context.Context, cfg Config) (History, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &workload{cfg: cfg, rec: NewRecorder(), log: cfg.Logger}
	w.rec.Record(Op{Kind: Info, Process: "runner", Node: -1,
		Detail: fmt.Sprintf("start: %d nodes, %d publishers, %d consumers, %v", len(cfg.Addrs), cfg.Publishers, cfg.Consumers, cfg.Duration)})

	if err := w.declare(ctx); err != nil {
		return w.rec.History(), err
	}

	consCtx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var consWG sync.WaitGroup
	for i := 0; i < cfg.Consumers; i++ {
		consWG.Add(1)
		go func() {
			defer consWG.Done()
			w.consumer(consCtx, i)
		}()
	}
	pubCtx, stopPublishers := context.WithCancel(ctx)
	defer stopPublishers()
	var pubWG sync.WaitGroup
	for i := 0; i < cfg.Publishers; i++ {
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			w.publisher(pubCtx, i)
		}()
	}

	nemCtx, stopNemesis := context.WithTimeout(ctx, cfg.Duration)
	defer stopNemesis()
	if cfg.Nemesis != nil {
		cfg.Nemesis(nemCtx, w.rec.Event)
	}
	<-nemCtx.Done()
	var errs []error
	if cfg.Heal != nil {
		w.log.Info("jepsen: healing")
		if err := cfg.Heal(ctx, w.rec.Event); err != nil {
			w.rec.Event(Event{Kind: Heal, Node: -1, Detail: "heal failed", Err: err})
			errs = append(errs, fmt.Errorf("jepsen: heal: %w", err))
		}
	}

	w.log.Info("jepsen: stopping publishers")
	w.rec.Record(Op{Kind: Info, Process: "runner", Node: -1, Detail: "stopping publishers"})
	stopPublishers()
	pubWG.Wait()

	w.log.Info("jepsen: draining")
	w.rec.Record(Op{Kind: Info, Process: "runner", Node: -1, Detail: "draining"})
	if err := w.drain(ctx); err != nil {
		errs = append(errs, err)
	} else {
		w.rec.Record(Op{Kind: Drained, Process: "runner", Node: -1})
	}
	stopConsumers()
	consWG.Wait()
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return w.rec.History(), errors.Join(errs...)
}

// dial opens a connection to node i, named after the client.
func (w *workload) dial(node int, name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("jepsen-" + name)
	return amqp.DialConfig(w.cfg.Addrs[node], amqp.Config{
		Dial:       amqp.DefaultDial(w.cfg.DialTimeout),
		Heartbeat:  w.cfg.Heartbeat,
		Properties: props,
	})
}

// sleep waits d or until ctx is done, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// declare declares the queue on the first node that accepts it.
func (w *workload) declare(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.DeclareTimeout)
	defer cancel()
	var last error
	for node := 0; ; node = (node + 1) % len(w.cfg.Addrs) {
		last = w.declareOn(node)
		if last == nil {
			w.rec.Record(Op{Kind: Info, Process: "runner", Node: node, Detail: "queue declared"})
			return nil
		}
		w.log.Warn("jepsen: declare", "node", node, "err", last)
		if !sleep(ctx, w.cfg.Backoff) {
			return fmt.Errorf("%w %q: %v", ErrDeclare, w.cfg.Queue, last)
		}
	}
}

func (w *workload) declareOn(node int) error {
	conn, err := w.dial(node, "declare")
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(w.cfg.Queue, true, false, false, false, w.cfg.QueueArgs)
	return err
}

// readyMessages asks any node for the queue's ready-message count.
func (w *workload) readyMessages() (int, error) {
	var last error
	for node := range w.cfg.Addrs {
		conn, err := w.dial(node, "drain-check")
		if err != nil {
			last = err
			continue
		}
		n, err := func() (int, error) {
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return 0, err
			}
			q, err := ch.QueueDeclarePassive(w.cfg.Queue, true, false, false, false, nil)
			return q.Messages, err
		}()
		if err == nil {
			return n, nil
		}
		last = err
	}
	return 0, last
}

// drain waits until the queue is empty and stays so: every consumer is
// consuming, nothing was delivered for DrainQuiet, and no message is ready.
func (w *workload) drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.DrainTimeout)
	defer cancel()
	w.touch()
	for sleep(ctx, 100*time.Millisecond) {
		if int(w.consuming.Load()) < w.cfg.Consumers {
			continue
		}
		if time.Since(time.Unix(0, w.lastActivity.Load())) < w.cfg.DrainQuiet {
			continue
		}
		n, err := w.readyMessages()
		if err != nil || n > 0 {
			w.log.Info("jepsen: drain: queue not empty", "ready", n, "err", err)
			w.touch()
			continue
		}
		return nil
	}
	return fmt.Errorf("%w within %v", ErrDrainTimeout, w.cfg.DrainTimeout)
}

// touch marks activity that restarts the drain's quiet period.
func (w *workload) touch() { w.lastActivity.Store(time.Now().UnixNano()) }
