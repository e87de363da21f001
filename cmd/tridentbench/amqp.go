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

// amqpScenario is 1 publisher → 1 consumer through one queue on the default
// exchange, each on its own connection.
//
// Without confirms: transient messages to a non-durable queue, an autoack
// (no-ack) consumer, an unthrottled publisher held back only by MaxInFlight.
//
// With confirms: persistent messages to a durable queue, a publisher in confirm
// mode with at most ConfirmWindow unconfirmed messages (NotifyPublish), a
// manual-ack consumer with prefetch Prefetch acking multiple every AckEvery.
type amqpScenario struct {
	name     string
	confirms bool
}

func (s amqpScenario) Name() string   { return s.name }
func (s amqpScenario) Scheme() string { return "amqp" }

// inFlightCheckEvery is how often (in publishes) the publisher compares its
// count with the consumer's, so that it does not read the consumer's counter
// on every message.
const inFlightCheckEvery = 256

func (s amqpScenario) Run(ctx context.Context, url string, p Params) (res Result, err error) {
	ctl, err := dial(url, s.name+" control")
	if err != nil {
		return Result{}, err
	}
	defer ctl.Close()
	ctlCh, err := ctl.Channel()
	if err != nil {
		return Result{}, fmt.Errorf("control channel: %w", err)
	}
	queue := "tridentbench." + s.name + "." + randomSuffix()
	if _, err := ctlCh.QueueDeclare(queue, s.confirms, false, false, false, nil); err != nil {
		return Result{}, fmt.Errorf("queue.declare %s: %w", queue, err)
	}
	defer func() {
		if derr := deleteQueue(ctl, ctlCh, queue); derr != nil && err == nil {
			err = derr
		}
	}()

	var c counters
	errc := make(chan error, 4)
	var wg sync.WaitGroup

	consConn, err := dial(url, s.name+" consumer")
	if err != nil {
		return Result{}, err
	}
	defer consConn.Close()
	pubConn, err := dial(url, s.name+" publisher")
	if err != nil {
		return Result{}, err
	}
	defer pubConn.Close()

	if err := s.startConsumer(consConn, queue, p, &c, errc, &wg); err != nil {
		return Result{}, err
	}
	stopPub, err := s.startPublisher(pubConn, queue, p, &c, errc, &wg)
	if err != nil {
		return Result{}, err
	}

	res, err = measure(ctx, &c, p, errc)

	// Stop: flag the workers, unblock a publisher waiting for confirm credit,
	// then close the connections, which ends the consumer and confirm loops and
	// any publish blocked by the broker (connection.blocked, TCP back-pressure).
	c.stop.Store(true)
	stopPub()
	pubConn.Close()
	consConn.Close()
	wg.Wait()
	return res, err
}

func (s amqpScenario) startConsumer(conn *amqp.Connection, queue string, p Params, c *counters, errc chan<- error, wg *sync.WaitGroup) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("consumer channel: %w", err)
	}
	if s.confirms {
		if err := ch.Qos(p.Prefetch, 0, false); err != nil {
			return fmt.Errorf("basic.qos: %w", err)
		}
	}
	deliveries, err := ch.Consume(queue, "", !s.confirms, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("basic.consume: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !s.confirms {
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
		var sent uint64
		for !c.stop.Load() {
			if sent%inFlightCheckEvery == 0 {
				for sent-c.consumed.Load() >= p.MaxInFlight {
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
