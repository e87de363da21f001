package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/protocol/amqp/wire"
)

// rawAMQPScenario drives the broker with a load generator that is not the
// bottleneck: publishers write pre-encoded basic.publish frames in batches
// of rawBatch messages per write, consumers scan the bytes they read for
// basic.deliver frames without decoding them, acks (multiple=true) and
// confirms are pipelined. Each pair of one publisher and one consumer has
// its own connections and queue on the default exchange.
//
// A run first measures saturation (Warmup, then Duration), with the
// broker's and this process's CPU; then, for each of LatencyRates, it
// offers that percentage of the saturation rate for LatencyDuration and
// records publish-to-deliver latency (the publisher stamps each body with
// the time just before the write of its batch; the consumer compares it
// with the time of the read that brought the delivery in). Every phase ends
// by waiting for the consumers to have received all that was sent, and
// fails if they did not: the counts are verified, not assumed.
type rawAMQPScenario struct {
	name       string
	persistent bool // durable queue, persistent messages, confirms, manual acks
	manualAck  bool // manual acks (implied by persistent)
	pairs      int  // publisher/consumer pairs, each with its own queue; 0 means 1
	// stream: each queue is a stream (x-queue-type stream; persistent
	// must be set too: confirms, manual acks, which a stream takes as
	// credit); the consumer reads from "next", so each phase counts what
	// it publishes.
	stream bool
}

func (s rawAMQPScenario) Name() string   { return s.name }
func (s rawAMQPScenario) Scheme() string { return "amqp" }

// rawBatch is how many messages a publisher writes at once at saturation.
const rawBatch = 256

// rawPair is one publisher and one consumer and their counters.
type rawPair struct {
	queue string
	pub   *rawConn
	cons  *rawConn
	c     counters // published (sent), consumed, nacked
	// confirmed counts messages the broker confirmed (confirms only);
	// confirmFrames the basic.ack/nack frames that did.
	confirmed     atomic.Uint64
	confirmFrames atomic.Uint64
	acked         atomic.Uint64 // deliveries the consumer acked (manual acks)
	gate          *gate
	hist          *histogram // the consumer's, latency phases only
	errc          chan error // shared by the phase's pairs
}

func (s rawAMQPScenario) Run(ctx context.Context, rawURL string, p Params) (Result, error) {
	npairs := max(s.pairs, 1)
	ctl, err := dial(rawURL, s.name+" control")
	if err != nil {
		return Result{}, err
	}
	defer ctl.Close()
	ch, err := ctl.Channel()
	if err != nil {
		return Result{}, err
	}
	queues := make([]string, npairs)
	suffix := randomSuffix()
	for i := range queues {
		queues[i] = fmt.Sprintf("tridentbench-%s-%d-%s", s.name, i, suffix)
		var args amqp.Table
		if s.stream {
			args = amqp.Table{"x-queue-type": "stream"}
		}
		if _, err := ch.QueueDeclare(queues[i], s.persistent, false, false, false, args); err != nil {
			return Result{}, fmt.Errorf("queue.declare: %w", err)
		}
	}
	defer func() {
		for _, q := range queues {
			_ = deleteQueue(ctl, ch, q)
		}
	}()
	return runRawPhases(rawURL, p, func(r Result) float64 { return r.ConsumeRate },
		func(rate float64, warmup, measured time.Duration, pid int) (Result, *RawStats, error) {
			return s.phase(ctx, rawURL, queues, p, rate, warmup, measured, pid)
		})
}

// phase runs the pairs for warmup+measure: unpaced at rate 0, else each
// publisher offering rate/len(queues) messages per second with latency
// stamps.
func (s rawAMQPScenario) phase(ctx context.Context, rawURL string, queues []string, p Params, rate float64,
	warmup, measured time.Duration, pid int) (Result, *RawStats, error) {
	pairs := make([]*rawPair, len(queues))
	defer func() {
		for _, pr := range pairs {
			if pr != nil {
				pr.close()
			}
		}
	}()
	var wg sync.WaitGroup
	errc := make(chan error, 1) // every pair's first error
	for i, q := range queues {
		pr := &rawPair{queue: q, gate: newGate(), errc: errc}
		pairs[i] = pr
		if rate > 0 {
			pr.hist = histPool.Get().(*histogram)
			*pr.hist = histogram{}
		}
		var err error
		if pr.cons, err = rawDial(rawURL); err != nil {
			return Result{}, nil, err
		}
		if pr.pub, err = rawDial(rawURL); err != nil {
			return Result{}, nil, err
		}
		if err := s.startConsumer(pr, p); err != nil {
			return Result{}, nil, err
		}
		if s.persistent {
			if err := pr.pub.rpc(&wire.ConfirmSelect{}); err != nil {
				return Result{}, nil, err
			}
		}
	}
	for _, pr := range pairs {
		wg.Add(3)
		go func() { defer wg.Done(); pr.consume(s, p) }()
		go func() { defer wg.Done(); pr.readConfirms() }()
		go func() { defer wg.Done(); pr.publish(s, p, rate/float64(len(pairs))) }()
	}
	res, cpu, err := measureRaw(ctx, p, warmup, measured, pid, errc, func(sum *counters) {
		var pub, con, nack uint64
		for _, pr := range pairs {
			con += pr.c.consumed.Load()
			nack += pr.c.nacked.Load()
			if s.persistent {
				pub += pr.confirmed.Load()
			} else {
				pub += pr.c.published.Load()
			}
		}
		sum.published.Store(pub)
		sum.consumed.Store(con)
		sum.nacked.Store(nack)
	})
	for _, pr := range pairs {
		pr.c.stop.Store(true)
		pr.gate.kick()
	}
	var verr error
	if err == nil {
		verr = verifyPairs(pairs, s.persistent, s.manualAck || s.persistent, 20*time.Second)
	}
	for _, pr := range pairs {
		pr.close()
	}
	wg.Wait()
	if err != nil {
		return Result{}, nil, err
	}
	if verr != nil {
		return Result{}, nil, verr
	}
	var hists []*histogram
	if rate > 0 {
		for _, pr := range pairs {
			hists = append(hists, pr.hist)
		}
	}
	raw := rawStatsOf(cpu, res, rate, hists)
	for _, pr := range pairs {
		raw.ConfirmFrames += pr.confirmFrames.Load()
		raw.Confirmed += pr.confirmed.Load()
	}
	return res, raw, nil
}

// verifyPairs waits until every consumer has received what its publisher
// sent (and, with confirms, the broker confirmed all of it).
func verifyPairs(pairs []*rawPair, confirms, acks bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, pr := range pairs {
		<-pr.pub.pubDone
		sent := pr.c.published.Load()
		for {
			got := pr.c.consumed.Load()
			conf := pr.confirmed.Load() + pr.c.nacked.Load()
			if got == sent && (!confirms || conf == sent) && (!acks || pr.acked.Load() == sent) {
				break
			}
			if got == sent && acks {
				_ = pr.cons.nc.SetReadDeadline(time.Now()) // the consumer acks the rest
			}
			if got > sent {
				return fmt.Errorf("queue %s: consumer received %d, more than the %d sent", pr.queue, got, sent)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("queue %s: consumer received %d of %d sent (%d confirmed)", pr.queue, got, sent, conf)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if n := pr.c.nacked.Load(); n > 0 {
			return fmt.Errorf("queue %s: %d publishes nacked", pr.queue, n)
		}
	}
	return nil
}

func (pr *rawPair) close() {
	if pr.pub != nil {
		pr.pub.nc.Close()
	}
	if pr.cons != nil {
		pr.cons.nc.Close()
	}
}

func (pr *rawPair) fail(err error) {
	if err == nil || pr.c.stop.Load() {
		return
	}
	select {
	case pr.errc <- err:
	default:
	}
}

func (s rawAMQPScenario) startConsumer(pr *rawPair, p Params) error {
	ack := s.manualAck || s.persistent
	if ack {
		if err := pr.cons.rpc(&wire.BasicQos{PrefetchCount: uint16(min(p.Prefetch, 65535))}); err != nil {
			return err
		}
	}
	var args wire.Table
	if s.stream {
		args = wire.Table{"x-stream-offset": "next"}
	}
	return pr.cons.rpc(&wire.BasicConsume{Queue: pr.queue, ConsumerTag: "raw", NoAck: !ack, Arguments: args})
}

// publish writes batches of pre-encoded messages; rate 0 means as fast as
// credit allows, else that many per second, stamped.
func (pr *rawPair) publish(s rawAMQPScenario, p Params, rate float64) {
	defer close(pr.pub.pubDone)
	size := max(p.MsgSize, 16)
	props := wire.Properties{DeliveryMode: 1}
	if s.persistent {
		props.DeliveryMode = 2
	}
	var one []byte
	one, _ = wire.AppendMethodFrame(one, 1, &wire.BasicPublish{RoutingKey: pr.queue})
	one, _ = wire.AppendHeaderFrame(one, 1, uint64(size), &props)
	bodyAt := len(one) + 7
	one = wire.AppendFrame(one, wire.FrameBody, 1, make([]byte, size))
	batch := make([]byte, 0, len(one)*rawBatch)
	for range rawBatch {
		batch = append(batch, one...)
	}
	maxInFlight := max(p.MaxInFlight, rawBatch)
	window := uint64(max(p.ConfirmWindow, rawBatch))
	credit := func(sent, n uint64) bool {
		if sent+n-pr.c.consumed.Load() > maxInFlight {
			return false
		}
		return !s.persistent || sent+n-pr.confirmed.Load()-pr.c.nacked.Load() <= window
	}
	err := rawPublish(rate, &pr.c.stop, pr.gate, &pr.c.published, credit, func(_, n, stamp uint64) error {
		b := batch[:n*uint64(len(one))]
		if stamp != 0 {
			for i := range n {
				binary.LittleEndian.PutUint64(b[int(i)*len(one)+bodyAt:], stamp)
			}
		}
		_, err := pr.pub.nc.Write(b)
		return err
	})
	pr.fail(err)
}

// rawEpoch is the zero of latency stamps (monotonic).
var rawEpoch = time.Now()

// consume counts deliveries, acks them (multiple, every AckEvery) and in
// latency phases records each one's latency.
func (pr *rawPair) consume(s rawAMQPScenario, p Params) {
	ack := s.manualAck || s.persistent
	ackEvery := uint64(max(p.AckEvery, 1))
	var acked, got uint64
	var ackBuf []byte
	nc := pr.cons
	// ackUpTo acks every delivery up to tag (multiple=true).
	ackUpTo := func(tag uint64) bool {
		ackBuf, _ = wire.AppendMethodFrame(ackBuf[:0], 1, &wire.BasicAck{DeliveryTag: tag, Multiple: true})
		if _, err := nc.nc.Write(ackBuf); err != nil {
			pr.fail(err)
			return false
		}
		acked = tag
		pr.acked.Store(acked)
		return true
	}
	buf := make([]byte, 256<<10)
	// What the handshake's reader already holds comes first.
	have, _ := nc.r.Read(buf[:nc.r.Buffered()])
	expectBody := false
	for {
		n, err := nc.nc.Read(buf[have:])
		if n > 0 {
			var now int64
			if pr.hist != nil {
				now = int64(time.Since(rawEpoch))
			}
			have += n
			off := 0
			for {
				f, used, perr := wire.ParseFrame(buf[off:have], 0)
				if perr != nil {
					if errors.Is(perr, io.ErrUnexpectedEOF) {
						break
					}
					pr.fail(perr)
					return
				}
				off += used
				switch f.Type {
				case wire.FrameMethod:
					if len(f.Payload) >= 4 && binary.BigEndian.Uint16(f.Payload) == wire.ClassBasic &&
						binary.BigEndian.Uint16(f.Payload[2:]) == wire.MethodBasicDeliver {
						got++
						expectBody = true
					} else if err := unexpectedMethod(f.Payload); err != nil {
						pr.fail(err)
						return
					}
				case wire.FrameBody:
					if expectBody && pr.hist != nil && len(f.Payload) >= 8 {
						pr.hist.record(now - int64(binary.LittleEndian.Uint64(f.Payload)))
					}
					expectBody = false
				}
			}
			copy(buf, buf[off:have])
			have -= off
			if have == len(buf) {
				buf = append(buf, make([]byte, len(buf))...)
			}
			pr.c.consumed.Store(got)
			pr.gate.kick()
			// Ack every AckEvery, and all at the end (the publisher has
			// stopped and this is all it sent): nothing may stay unacked,
			// to be requeued into the next phase when the connection goes.
			if ack && got > acked && (got-acked >= ackEvery || (pr.c.stop.Load() && got == pr.c.published.Load())) {
				if !ackUpTo(got) {
					return
				}
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && pr.c.stop.Load() {
				// verifyPairs woke us: everything arrived before the
				// stop; ack the rest.
				if ack && got > acked && !ackUpTo(got) {
					return
				}
				_ = nc.nc.SetReadDeadline(time.Time{})
				continue
			}
			if !pr.c.stop.Load() {
				pr.fail(fmt.Errorf("consumer: %w", err))
			}
			return
		}
	}
}

// readConfirms reads the publisher's connection: confirms, and errors.
func (pr *rawPair) readConfirms() {
	r := pr.pub.r
	var low uint64 // every tag ≤ low is settled
	early := map[uint64]bool{}
	settle := func(tag uint64, multiple, ok bool) {
		pr.confirmFrames.Add(1)
		var n uint64
		if multiple {
			for t := low + 1; t <= tag; t++ {
				if !early[t] {
					n++
				}
				delete(early, t)
			}
			low = max(low, tag)
		} else {
			n = 1
			if tag == low+1 {
				low++
				for early[low+1] {
					delete(early, low+1)
					low++
				}
			} else {
				early[tag] = true
			}
		}
		if ok {
			pr.confirmed.Add(n)
		} else {
			pr.c.nacked.Add(n)
		}
		pr.gate.kick()
	}
	for {
		f, err := wire.ReadFrame(r, 0, nil)
		if err != nil {
			if !pr.c.stop.Load() {
				pr.fail(fmt.Errorf("publisher connection: %w", err))
			}
			return
		}
		if f.Type != wire.FrameMethod || len(f.Payload) < 4 {
			continue
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			pr.fail(err)
			return
		}
		switch m := m.(type) {
		case *wire.BasicAck:
			settle(m.DeliveryTag, m.Multiple, true)
		case *wire.BasicNack:
			settle(m.DeliveryTag, m.Multiple, false)
		default:
			if err := unexpectedMethod(f.Payload); err != nil {
				pr.fail(err)
				return
			}
		}
	}
}

// unexpectedMethod turns a channel.close or connection.close into an error.
func unexpectedMethod(payload []byte) error {
	m, err := wire.DecodeMethod(payload)
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case *wire.ChannelClose:
		return fmt.Errorf("channel closed by the broker: %d %s", m.ReplyCode, m.ReplyText)
	case *wire.ConnectionClose:
		return fmt.Errorf("connection closed by the broker: %d %s", m.ReplyCode, m.ReplyText)
	}
	return nil
}

// rawConn is an AMQP 0-9-1 connection with channel 1 open, spoken to with
// the broker's own codec (protocol/amqp/wire) and nothing else.
type rawConn struct {
	nc      net.Conn
	r       *bufio.Reader // handshake and rpc only
	pubDone chan struct{}
}

func rawDial(rawURL string) (*rawConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	user, pass := "guest", "guest"
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	vhost := strings.TrimPrefix(u.Path, "/")
	if vhost == "" {
		vhost = "/"
	} else if v, err := url.PathUnescape(vhost); err == nil {
		vhost = v
	}
	nc, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &rawConn{nc: nc, r: bufio.NewReaderSize(nc, 64<<10), pubDone: make(chan struct{})}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	fail := func(err error) (*rawConn, error) {
		nc.Close()
		return nil, fmt.Errorf("raw amqp handshake with %s: %w", u.Host, err)
	}
	if _, err := nc.Write([]byte(wire.ProtocolHeader)); err != nil {
		return fail(err)
	}
	if _, err := c.expect(0, "connection.start"); err != nil {
		return fail(err)
	}
	if err := c.send(0, &wire.ConnectionStartOK{ClientProperties: wire.Table{"product": "tridentbench raw"},
		Mechanism: "PLAIN", Response: "\x00" + user + "\x00" + pass, Locale: "en_US"}); err != nil {
		return fail(err)
	}
	m, err := c.expect(0, "connection.tune")
	if err != nil {
		return fail(err)
	}
	tune := m.(*wire.ConnectionTune)
	if err := c.send(0, &wire.ConnectionTuneOK{ChannelMax: 1, FrameMax: tune.FrameMax}); err != nil {
		return fail(err)
	}
	if err := c.send(0, &wire.ConnectionOpen{VirtualHost: vhost}); err != nil {
		return fail(err)
	}
	if _, err := c.expect(0, "connection.open-ok"); err != nil {
		return fail(err)
	}
	if err := c.rpc(&wire.ChannelOpen{}); err != nil {
		return fail(err)
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

func (c *rawConn) send(ch uint16, m wire.Method) error {
	b, err := wire.AppendMethodFrame(nil, ch, m)
	if err != nil {
		return err
	}
	_, err = c.nc.Write(b)
	return err
}

// expect reads the next method and checks its name.
func (c *rawConn) expect(ch uint16, name string) (wire.Method, error) {
	for {
		f, err := wire.ReadFrame(c.r, 0, nil)
		if err != nil {
			return nil, err
		}
		if f.Type != wire.FrameMethod {
			continue
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			return nil, err
		}
		if err := unexpectedMethod(f.Payload); err != nil {
			return nil, err
		}
		if f.Channel != ch || m.Name() != name {
			return nil, fmt.Errorf("got %s on channel %d, want %s", m.Name(), f.Channel, name)
		}
		return m, nil
	}
}

// rpc sends a synchronous method on channel 1 and reads its reply.
func (c *rawConn) rpc(m wire.Method) error {
	if err := c.send(1, m); err != nil {
		return err
	}
	_, err := c.expect(1, m.Name()+"-ok")
	return err
}
