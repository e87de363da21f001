package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// amqpScenario is publishers → consumers through one queue on the default
// exchange, each client on its own connection (1 → 1 unless set).
//
// Without confirms: transient messages to a non-durable queue, autoack
// (no-ack) consumers, unthrottled publishers held back only by MaxInFlight.
//
// With confirms: persistent messages to a durable queue, publishers in
// confirm mode with at most ConfirmWindow unconfirmed messages each
// (NotifyPublish), manual-ack consumers with prefetch Prefetch acking
// multiple every AckEvery.
//
// With quorum (set together with confirms): the queue is declared with
// x-queue-type quorum. Against a cluster target (RunCluster) the clients are placed on
// the nodes by the cluster's placement once the queue's leader is known.
type amqpScenario struct {
	name       string
	confirms   bool
	quorum     bool
	stream     bool // x-queue-type stream (with confirms); consumers read from next
	publishers int  // 0 means 1
	consumers  int  // 0 means 1
}

func (s amqpScenario) Name() string   { return s.name }
func (s amqpScenario) Scheme() string { return "amqp" }

// OnCluster: only the quorum scenarios are about a cluster; a classic
// queue lives on one node, which the single-node target already measures.
func (s amqpScenario) OnCluster() bool { return s.quorum }

func (s amqpScenario) clients() (pubs, cons int) {
	pubs, cons = max(s.publishers, 1), max(s.consumers, 1)
	return pubs, cons
}

// inFlightCheckEvery is how often (in publishes) a publisher adds its sends to
// the shared count and compares it with the consumers', so that it does not
// touch the shared counters on every message.
const inFlightCheckEvery = 256

// layout says where a run's clients connect: the control connection (which
// declares and deletes the queue) and, once the queue exists, one URL per
// publisher and per consumer, with a note for the report.
type layout struct {
	control string
	place   func(ctx context.Context, queue string, pubs, cons int) (pubURLs, consURLs []string, note string, err error)
}

// Run runs every client against url.
func (s amqpScenario) Run(ctx context.Context, url string, p Params) (Result, error) {
	return s.run(ctx, layout{control: url, place: func(_ context.Context, _ string, pubs, cons int) ([]string, []string, string, error) {
		return repeat(url, pubs), repeat(url, cons), "", nil
	}}, p)
}

// RunCluster runs against a cluster target, clients placed by c.
func (s amqpScenario) RunCluster(ctx context.Context, c *localCluster, p Params) (Result, error) {
	return s.run(ctx, layout{control: c.nodes[0].p.AMQPURL, place: c.place}, p)
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func (s amqpScenario) run(ctx context.Context, lay layout, p Params) (res Result, err error) {
	ctl, err := dial(lay.control, s.name+" control")
	if err != nil {
		return Result{}, err
	}
	defer ctl.Close()
	ctlCh, err := ctl.Channel()
	if err != nil {
		return Result{}, fmt.Errorf("control channel: %w", err)
	}
	queue := "tridentbench." + s.name + "." + randomSuffix()
	var args amqp.Table
	if s.quorum {
		args = amqp.Table{"x-queue-type": "quorum"}
	}
	if s.stream {
		args = amqp.Table{"x-queue-type": "stream"}
	}
	if _, err := ctlCh.QueueDeclare(queue, s.confirms || s.quorum, false, false, false, args); err != nil {
		return Result{}, fmt.Errorf("queue.declare %s: %w", queue, err)
	}
	defer func() {
		if derr := deleteQueue(ctl, ctlCh, queue); derr != nil && err == nil {
			err = derr
		}
	}()

	npub, ncons := s.clients()
	pubURLs, consURLs, note, err := lay.place(ctx, queue, npub, ncons)
	if err != nil {
		return Result{}, err
	}

	var c counters
	errc := make(chan error, 2*(npub+ncons))
	var wg sync.WaitGroup
	var conns []*amqp.Connection
	var stops []func()
	// Stop: flag the workers, unblock publishers waiting for confirm credit,
	// then close the connections, which ends the consumer and confirm loops
	// and any publish blocked by the broker (connection.blocked, TCP
	// back-pressure).
	defer func() {
		c.stop.Store(true)
		for _, stop := range stops {
			stop()
		}
		for _, conn := range conns {
			conn.Close()
		}
		wg.Wait()
	}()

	for i, u := range consURLs {
		conn, err := dial(u, fmt.Sprintf("%s consumer %d", s.name, i))
		if err != nil {
			return Result{}, err
		}
		conns = append(conns, conn)
		if err := s.startConsumer(conn, queue, p, &c, errc, &wg); err != nil {
			return Result{}, err
		}
	}
	for i, u := range pubURLs {
		conn, err := dial(u, fmt.Sprintf("%s publisher %d", s.name, i))
		if err != nil {
			return Result{}, err
		}
		conns = append(conns, conn)
		stop, err := s.startPublisher(conn, queue, p, &c, errc, &wg)
		if err != nil {
			return Result{}, err
		}
		stops = append(stops, stop)
	}

	res, err = measure(ctx, &c, p, errc)
	res.Placement = note
	return res, err
}

func (s amqpScenario) startConsumer(conn *amqp.Connection, queue string, p Params, c *counters, errc chan<- error, wg *sync.WaitGroup) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("consumer channel: %w", err)
	}
	manual := s.confirms
	if manual {
		if err := ch.Qos(p.Prefetch, 0, false); err != nil {
			return fmt.Errorf("basic.qos: %w", err)
		}
	}
	var cargs amqp.Table
	if s.stream {
		cargs = amqp.Table{"x-stream-offset": "next"}
	}
	deliveries, err := ch.Consume(queue, "", !manual, false, false, false, cargs)
	if err != nil {
		return fmt.Errorf("basic.consume: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !manual {
			for range deliveries {
				c.consumed.Add(1)
			}
		} else {
			ackEvery, n := p.AckEvery, 0
			for d := range deliveries {
				c.consumed.Add(1)
				if n++; n >= ackEvery {
					n = 0
					if err := ch.Ack(d.DeliveryTag, true); err != nil {
						c.fail(errc, fmt.Errorf("basic.ack: %w", err))
						return
					}
				}
			}
		}
		c.fail(errc, errors.New("consumer: delivery channel closed by the broker"))
	}()
	return nil
}

// startPublisher starts the publisher goroutine (and, with confirms, the
// confirm reader). The returned func releases a publisher waiting for credit.
func (s amqpScenario) startPublisher(conn *amqp.Connection, queue string, p Params, c *counters, errc chan<- error, wg *sync.WaitGroup) (func(), error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("publisher channel: %w", err)
	}
	msg := amqp.Publishing{Body: make([]byte, p.MsgSize), DeliveryMode: amqp.Transient}
	stopped := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(stopped) }) }

	// credit holds one token per unconfirmed message (confirm mode only).
	var credit chan struct{}
	if s.confirms {
		msg.DeliveryMode = amqp.Persistent
		if err := ch.Confirm(false); err != nil {
			return nil, fmt.Errorf("confirm.select: %w", err)
		}
		credit = make(chan struct{}, p.ConfirmWindow)
		confirms := ch.NotifyPublish(make(chan amqp.Confirmation, p.ConfirmWindow+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for conf := range confirms {
				<-credit
				if conf.Ack {
					c.published.Add(1)
				} else {
					c.nacked.Add(1)
				}
			}
		}()
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		var sent, total uint64 // this publisher's, all publishers' (as of the last check)
		for !c.stop.Load() {
			if sent%inFlightCheckEvery == 0 {
				if sent > 0 {
					total = c.sent.Add(inFlightCheckEvery)
				}
				for total-min(total, c.consumed.Load()) >= p.MaxInFlight {
					if c.stop.Load() {
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			if credit != nil {
				select {
				case credit <- struct{}{}:
				default:
					select {
					case credit <- struct{}{}:
					case <-stopped:
						return
					}
				}
			}
			if err := ch.PublishWithContext(ctx, "", queue, false, false, msg); err != nil {
				c.fail(errc, fmt.Errorf("basic.publish: %w", err))
				return
			}
			sent++
			if credit == nil {
				c.published.Add(1)
			}
		}
	}()
	return stop, nil
}

func dial(url, name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("tridentbench " + name)
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Properties: props,
	})
	if err != nil {
		return nil, fmt.Errorf("dial (%s): %w", name, err)
	}
	return conn, nil
}

// deleteQueue deletes queue, reopening the control channel once if the broker
// closed it.
func deleteQueue(conn *amqp.Connection, ch *amqp.Channel, queue string) error {
	if _, err := ch.QueueDelete(queue, false, false, false); err == nil {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("queue.delete %s: %w", queue, err)
	}
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		return fmt.Errorf("queue.delete %s: %w", queue, err)
	}
	return nil
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
