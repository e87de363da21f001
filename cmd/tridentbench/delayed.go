package main

// The delayed-message benchmark (--delayed N, issue 13): N persistent
// messages published with confirms to a durable x-delayed-message exchange,
// their due times spread evenly (in random order) over --delayed-span,
// starting --delayed-lead after the publishing starts; one consumer on the
// bound queue. It reports the publish rate, the broker's resident memory
// while it holds them all (end of publishing) and at its peak, and the
// lateness of each message (its arrival at the consumer minus its due
// time): p50, p99, max. A message whose due time had already passed when
// its turn to be published came (the lead was too short) is counted apart
// and published with a 1 ms delay.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

const (
	delayedBenchExchange = "tridentbench-delayed"
	delayedBenchQueue    = "tridentbench-delayed-q"
)

func runDelayed(ctx context.Context, o *options) error {
	n := o.delayed
	done, err := buildTrident(ctx, o)
	if err != nil {
		return err
	}
	defer done()
	proc, err := testbin.Launch(ctx, testbin.Options{Binary: o.tridentBin, ExtraArgs: o.tridentArgs})
	if err != nil {
		return err
	}
	defer proc.Cleanup()
	fmt.Fprintf(os.Stderr, "tridentbench: trident on %s, data %s\n", proc.AMQPAddr, proc.DataDir)
	mem := startRSS(proc.Pid)

	conn, err := amqp.Dial(proc.AMQPURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(delayedBenchExchange, "x-delayed-message", true, false, false, false,
		amqp.Table{"x-delayed-type": "direct"}); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(delayedBenchQueue, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.QueueBind(delayedBenchQueue, "k", delayedBenchExchange, false, nil); err != nil {
		return err
	}

	// The consumer, on its own connection.
	cconn, err := amqp.Dial(proc.AMQPURL)
	if err != nil {
		return err
	}
	defer cconn.Close()
	cch, err := cconn.Channel()
	if err != nil {
		return err
	}
	ds, err := cch.Consume(delayedBenchQueue, "", true, false, false, false, nil)
	if err != nil {
		return err
	}
	late := make([]int64, 0, n) // microseconds
	var got atomic.Int64
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for d := range ds {
			now := time.Now().UnixMicro()
			if len(d.Body) >= 8 {
				due := int64(binary.BigEndian.Uint64(d.Body))
				late = append(late, now-due*1000)
			}
			if got.Add(1) == int64(n) {
				return
			}
		}
	}()

	// Publish: due times spread over the span, in random order.
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, o.params.ConfirmWindow*2))
	start := time.Now()
	first := start.Add(o.delayedLead).UnixMilli()
	order := rand.Perm(n)
	body := make([]byte, max(o.params.MsgSize, 8))
	window := make(chan struct{}, o.params.ConfirmWindow)
	confirmed := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			c, ok := <-confirms
			if !ok || !c.Ack {
				confirmed <- fmt.Errorf("confirm %d: nack or closed", i)
				return
			}
			<-window
		}
		confirmed <- nil
	}()
	tooLate := 0
	spanMs := o.delayedSpan.Milliseconds()
	for _, k := range order {
		due := first + int64(k)*spanMs/int64(n)
		delay := due - time.Now().UnixMilli()
		if delay < 1 {
			delay, tooLate = 1, tooLate+1
			due = time.Now().UnixMilli() + 1
		}
		binary.BigEndian.PutUint64(body, uint64(due))
		window <- struct{}{}
		if err := ch.PublishWithContext(ctx, delayedBenchExchange, "k", false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Headers: amqp.Table{"x-delay": delay}, Body: body}); err != nil {
			return err
		}
	}
	if err := <-confirmed; err != nil {
		return err
	}
	pubTime := time.Since(start)
	rssHeld := rss(proc.Pid())
	anonHeld := procStatus(proc.Pid(), "RssAnon")
	held := n - int(got.Load())

	select {
	case <-consumed:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(time.UnixMilli(first+spanMs)) + 2*time.Minute):
		return fmt.Errorf("%d of %d delayed messages arrived", got.Load(), n)
	}
	peak := max(hwm(proc.Pid()), mem.stop())
	rssEnd := rss(proc.Pid())
	slices.Sort(late)
	pct := func(p float64) time.Duration {
		if len(late) == 0 {
			return 0
		}
		return time.Duration(late[min(len(late)-1, int(p*float64(len(late))))]) * time.Microsecond
	}
	fmt.Printf("delayed messages: %d persistent, %d B bodies, due over %v starting %v after the first publish\n",
		n, len(body), o.delayedSpan, o.delayedLead)
	fmt.Printf("  publish+confirm: %v (%.0f msgs/s); published after their due time: %d\n",
		pubTime.Round(time.Millisecond), float64(n)/pubTime.Seconds(), tooLate)
	fmt.Printf("  RSS holding %d: %s (anonymous %s: without the store's mapped files); peak RSS: %s (anonymous %s); RSS at the end: %s\n",
		held, mib(rssHeld), mib(anonHeld), mib(peak), mib(mem.peakAnon), mib(rssEnd))
	fmt.Printf("  lateness (arrival at the consumer - due): p50 %v, p99 %v, max %v\n",
		pct(0.50).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), pct(1).Round(10*time.Microsecond))
	return nil
}
