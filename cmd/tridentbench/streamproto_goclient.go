package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	amqp10 "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

// spEnv opens an environment on u with the benchmark's socket buffers,
// each producer and consumer on its own connection.
func spEnv(o *options, u spURL) (*stream.Environment, error) {
	opts := stream.NewEnvironmentOptions().SetHost(u.host).SetPort(u.port).SetUser(u.user).SetPassword(u.pass).
		SetVHost(u.vhost).SetMaxProducersPerClient(1).SetMaxConsumersPerClient(1).SetRPCTimeout(30 * time.Second)
	if o.streamProtoSockBuf > 0 {
		opts = opts.SetReadBuffer(o.streamProtoSockBuf).SetWriteBuffer(o.streamProtoSockBuf)
	}
	return stream.NewEnvironment(opts)
}

func spGoTarget(ctx context.Context, o *options, t spTarget, n int) ([]spPhase, error) {
	u, err := parseSPURL(t.url)
	if err != nil {
		return nil, err
	}
	env, err := spEnv(o, u)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	var out []spPhase
	var small string
	for _, size := range []int{16, 1024} {
		name := "tridentbench-sp-" + randomSuffix()
		if err := env.DeclareStream(name, &stream.StreamOptions{}); err != nil {
			return out, fmt.Errorf("declare %s: %w", name, err)
		}
		if size == 16 {
			small = name
		} else {
			defer env.DeleteStream(name)
		}
		p, err := spRunPhase(t, fmt.Sprintf("go publish %s", sizeName(size)), func() (spPhase, error) {
			return spGoPublish(ctx, o, env, name, n, size)
		})
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	if o.streamProtoSuper > 0 {
		sp, err := spGoSuperPhase(ctx, o, env, u, t, n)
		out = append(out, sp...)
		if err != nil {
			return out, err
		}
	}
	defer env.DeleteStream(small)
	for _, k := range []int{1, 10} {
		p, err := spRunPhase(t, fmt.Sprintf("go consume x%d", k), func() (spPhase, error) {
			return spReadAll(ctx, k, n, func(ctx context.Context, n int) (float64, error) {
				return spGoConsume(ctx, o, u, small, n)
			})
		})
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// spGoSuperPhase publishes n 16-byte messages to a super stream of
// --stream-protocol-super partitions (issue 41: against "go publish 16 B",
// one stream, in the same run), then reads them with as many members of
// one single-active consumer group, each its own connection. RabbitMQ
// before 3.13 cannot declare a super stream over the protocol (nor 3.10
// run SAC on streams): a target that refuses is reported and skipped.
func spGoSuperPhase(ctx context.Context, o *options, env *stream.Environment, u spURL, t spTarget, n int) ([]spPhase, error) {
	name := "tridentbench-ss-" + randomSuffix()
	k := o.streamProtoSuper
	phase := fmt.Sprintf("go super x%d publish 16 B", k)
	if err := env.DeclareSuperStream(name, stream.NewPartitionsOptions(k)); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: declare refused (%v), skipped\n", t.name, phase, err)
		return nil, nil
	}
	defer env.DeleteSuperStream(name)
	p, err := spRunPhase(t, phase, func() (spPhase, error) { return spGoSuperPublish(ctx, o, env, name, n, 16) })
	if err != nil {
		return nil, err
	}
	c, err := spRunPhase(t, fmt.Sprintf("go super x%d consume, %d SAC", k, k), func() (spPhase, error) {
		return spGoSuperConsume(ctx, o, env, u, name, k, n)
	})
	return []spPhase{p, c}, err
}

// spGoSuperConsume reads the n messages of super stream name's k
// partitions with k members of the single-active group "tridentbench",
// each from the first offset: the rate until every message arrived once
// (a member that takes a partition over while the group settles reads it
// again from the first offset: those are counted as duplicates).
func spGoSuperConsume(ctx context.Context, o *options, env *stream.Environment, u spURL, name string, k, n int) (spPhase, error) {
	p := spPhase{Messages: n}
	tally := newIndexTally(n)
	handler := func(_ stream.ConsumerContext, m *amqp10.Message) {
		if len(m.Data) > 0 {
			tally.add(m.Data[0])
		}
	}
	first := func(string, bool) stream.OffsetSpecification { return stream.OffsetSpecification{}.First() }
	start := time.Now()
	for range k {
		menv, err := spEnv(o, u)
		if err != nil {
			return p, err
		}
		defer menv.Close()
		_, err = menv.NewSuperStreamConsumer(name, handler, stream.NewSuperStreamConsumerOptions().
			SetConsumerName("tridentbench").SetManualCommit().SetOffset(stream.OffsetSpecification{}.First()).
			SetSingleActiveConsumer(stream.NewSingleActiveConsumer(first)))
		if err != nil {
			return p, err
		}
	}
	select {
	case <-tally.all:
	case <-ctx.Done():
		return p, ctx.Err()
	case <-time.After(5 * time.Minute):
		distinct, _, _ := tally.counts()
		return p, fmt.Errorf("super stream consumers stalled after %d of %d", distinct, n)
	}
	p.Rate = float64(n) / time.Since(start).Seconds()
	_, p.Duplicates, _ = tally.counts()
	return p, nil
}

// spGoPublish publishes n messages of size bytes (the first 8 the
// message's index) with the client's Send, at most the window
// unconfirmed, and waits for every confirm.
func spGoPublish(ctx context.Context, o *options, env *stream.Environment, name string, n, size int) (spPhase, error) {
	prod, err := env.NewProducer(name, stream.NewProducerOptions())
	if err != nil {
		return spPhase{Messages: n}, err
	}
	defer prod.Close()
	return spPublishConfirmed(ctx, o, n, size, prod.Send, prod.NotifyPublishConfirmation())
}

// spGoSuperPublish is spGoPublish to a super stream: the client's super
// stream producer (one producer per partition, each on its own
// connection) routes each message by the murmur3 hash of a key, as
// RabbitMQ's clients do: here the message's index in decimal, taken from
// its body, so that the messages are the single stream phase's.
func spGoSuperPublish(ctx context.Context, o *options, env *stream.Environment, name string, n, size int) (spPhase, error) {
	key := func(m message.StreamMessage) string {
		return strconv.FormatUint(binary.BigEndian.Uint64(m.GetData()[0]), 10)
	}
	prod, err := env.NewSuperStreamProducer(name, stream.NewSuperStreamProducerOptions(stream.NewHashRoutingStrategy(key)))
	if err != nil {
		return spPhase{Messages: n}, err
	}
	defer prod.Close()
	confirms := make(chan []*stream.ConfirmationStatus, 64)
	pc := prod.NotifyPublishConfirmation(64)
	go func() {
		for c := range pc {
			confirms <- c.ConfirmationStatus
		}
		close(confirms)
	}()
	return spPublishConfirmed(ctx, o, n, size, prod.Send, confirms)
}

// spPublishConfirmed sends n messages of size bytes (the first 8 the
// message's index) through send, at most the window unconfirmed, and
// checks that each is confirmed exactly once on confirms.
func spPublishConfirmed(ctx context.Context, o *options, n, size int, send func(message.StreamMessage) error, confirms <-chan []*stream.ConfirmationStatus) (spPhase, error) {
	p := spPhase{Messages: n}
	window := max(o.streamProtoWindow, 1)
	credit := make(chan struct{}, window)
	for range window {
		credit <- struct{}{}
	}
	sentAt := make([]int64, n)
	seen := make([]bool, n)
	lat := make([]int64, 0, n) // send to confirm, ns
	done := make(chan error, 1)
	var last atomic.Int64
	go func() {
		got := 0
		for got < n {
			batch, ok := <-confirms
			if !ok {
				done <- fmt.Errorf("confirmations ended after %d of %d", got, n)
				return
			}
			now := time.Now()
			for _, st := range batch {
				if !st.IsConfirmed() {
					done <- fmt.Errorf("message refused: %v (code %d)", st.GetError(), st.GetErrorCode())
					return
				}
				data := st.GetMessage().GetData()
				if len(data) == 0 || len(data[0]) < 8 {
					done <- errors.New("confirmed message without its body")
					return
				}
				i := binary.BigEndian.Uint64(data[0])
				if i >= uint64(n) || seen[i] {
					done <- fmt.Errorf("message %d confirmed twice or unknown", i)
					return
				}
				seen[i] = true
				lat = append(lat, now.UnixNano()-sentAt[i])
				got++
				credit <- struct{}{}
			}
			last.Store(now.UnixNano())
		}
		done <- nil
	}()
	start := time.Now()
	for i := range n {
		select {
		case <-credit:
		case err := <-done:
			if err == nil {
				err = errors.New("confirms ended early")
			}
			return p, err
		case <-ctx.Done():
			return p, ctx.Err()
		}
		body := make([]byte, max(size, 8))
		binary.BigEndian.PutUint64(body, uint64(i))
		sentAt[i] = time.Now().UnixNano()
		if err := send(amqp10.NewMessage(body)); err != nil {
			return p, err
		}
	}
	select {
	case err := <-done:
		if err != nil {
			return p, err
		}
	case <-ctx.Done():
		return p, ctx.Err()
	case <-time.After(5 * time.Minute):
		return p, errors.New("confirms stalled")
	}
	p.Rate = float64(n) / time.Duration(last.Load()-start.UnixNano()).Seconds()
	p.P50us, p.P99us = quantilesUs(lat)
	return p, nil
}

// spGoConsume reads name from first on its own environment until n
// messages came, checking that their offsets are 0 … n-1 in order.
func spGoConsume(ctx context.Context, o *options, u spURL, name string, n int) (float64, error) {
	env, err := spEnv(o, u)
	if err != nil {
		return 0, err
	}
	defer env.Close()
	var got atomic.Int64 // the handler runs on one goroutine; others read it
	var bad atomic.Value
	done := make(chan struct{})
	handler := func(c stream.ConsumerContext, _ *amqp10.Message) {
		g := got.Load()
		if off := c.Consumer.GetOffset(); off != g {
			bad.CompareAndSwap(nil, fmt.Errorf("offset %d where %d was due", off, g))
		}
		if got.Add(1) == int64(n) {
			close(done)
		}
	}
	start := time.Now()
	cons, err := env.NewConsumer(name, handler, stream.NewConsumerOptions().
		SetOffset(stream.OffsetSpecification{}.First()).SetConsumerName(""))
	if err != nil {
		return 0, err
	}
	defer cons.Close()
	select {
	case <-done:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("consumer stalled after %d of %d", got.Load(), n)
	}
	rate := float64(n) / time.Since(start).Seconds()
	if e, _ := bad.Load().(error); e != nil {
		return rate, e
	}
	// Nothing after the n-th: a duplicate would come as offset n or more.
	time.Sleep(200 * time.Millisecond)
	if g := got.Load(); g != int64(n) {
		return rate, fmt.Errorf("%d messages consumed, %d published", g, n)
	}
	return rate, nil
}
