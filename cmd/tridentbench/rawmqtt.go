package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Raw MQTT scenarios (MQTT 3.1.1 spoken with hand-encoded packets, no
// client library; the MQTT side of the load generator of rawamqp.go):
//
//	raw-mqtt-qos0-1to1       1 publisher → 1 subscriber, QoS 0
//	raw-mqtt-qos1-1to1       the same at QoS 1: the publisher pipelines up to
//	                         --confirm-window PUBLISHes awaiting PUBACK, the
//	                         subscriber PUBACKs each delivery (one write per read)
//	raw-mqtt-qos0-fanout100  1 publisher → 100 subscribers of one topic
//	raw-mqtt-qos1-fanout100  the same at QoS 1
//
// The publisher writes rawBatch pre-encoded PUBLISHes per write; a
// subscriber scans what it reads for PUBLISH packets without decoding more
// than their header (and, at QoS 1, their packet id). published/s counts
// what was sent (QoS 0) or PUBACKed (QoS 1); consumed/s counts every
// subscriber's deliveries. Each phase ends by waiting for every subscriber
// to have received all that was sent: the counts are verified. Latency at
// --latency-rates is measured as in the raw AMQP scenarios (the publisher
// stamps each payload just before the write of its batch).
var rawMQTTScenarios = []Scenario{
	rawMQTTScenario{name: "raw-mqtt-qos0-1to1", qos: 0, subscribers: 1},
	rawMQTTScenario{name: "raw-mqtt-qos1-1to1", qos: 1, subscribers: 1},
	rawMQTTScenario{name: "raw-mqtt-qos0-fanout100", qos: 0, subscribers: 100},
	rawMQTTScenario{name: "raw-mqtt-qos1-fanout100", qos: 1, subscribers: 100},
}

type rawMQTTScenario struct {
	name        string
	qos         byte
	subscribers int
}

func (s rawMQTTScenario) Name() string   { return s.name }
func (s rawMQTTScenario) Scheme() string { return "mqtt" }

// MQTT control packet types (the high nibble of the first byte).
const (
	mqttConnect   = 1
	mqttConnack   = 2
	mqttPublish   = 3
	mqttPuback    = 4
	mqttSubscribe = 8
	mqttSuback    = 9
)

// rawMQTTConn is one connection and what its reader has not consumed.
type rawMQTTConn struct {
	rawReader
}

// mqttPacket appends a packet: first byte, remaining length, body.
func mqttPacket(b []byte, first byte, body []byte) []byte {
	b = append(b, first)
	n := len(body)
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			break
		}
	}
	return append(b, body...)
}

func mqttString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// nextPacket returns the next whole packet in c's buffer (first byte and
// body) and how many bytes it took, or ok false if it is not all there.
func (c *rawMQTTConn) nextPacket(off int) (first byte, body []byte, used int, ok bool, err error) {
	b := c.buf[off:c.have]
	if len(b) < 2 {
		return 0, nil, 0, false, nil
	}
	n, mul, i := 0, 1, 1
	for {
		if i >= len(b) {
			return 0, nil, 0, false, nil
		}
		if i > 4 {
			return 0, nil, 0, false, errors.New("mqtt: bad remaining length")
		}
		n += int(b[i]&0x7f) * mul
		mul *= 128
		i++
		if b[i-1]&0x80 == 0 {
			break
		}
	}
	if len(b) < i+n {
		return 0, nil, 0, false, nil
	}
	return b[0], b[i : i+n], i + n, true, nil
}

// expect reads packets until one of type typ, during a handshake.
func (c *rawMQTTConn) expect(typ byte) ([]byte, error) {
	for {
		first, body, used, ok, err := c.nextPacket(0)
		if err != nil {
			return nil, err
		}
		if ok {
			out := append([]byte(nil), body...)
			c.drop(used)
			if first>>4 == typ {
				return out, nil
			}
			continue
		}
		if _, err := c.fill(0); err != nil {
			return nil, err
		}
	}
}

// rawMQTTDial connects a clean-session MQTT 3.1.1 client.
func rawMQTTDial(rawURL, id string) (*rawMQTTConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	nc, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &rawMQTTConn{rawReader{nc: nc, buf: make([]byte, 256<<10)}}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	var body []byte
	body = mqttString(body, "MQTT")
	flags := byte(0x02) // clean session
	user, pass := "", ""
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
		flags |= 0x80
		if pass != "" {
			flags |= 0x40
		}
	}
	body = append(body, 4, flags, 0, 60) // level 4 (3.1.1), keep-alive 60 s
	body = mqttString(body, id)
	if user != "" {
		body = mqttString(body, user)
		if pass != "" {
			body = mqttString(body, pass)
		}
	}
	if _, err := nc.Write(mqttPacket(nil, mqttConnect<<4, body)); err != nil {
		nc.Close()
		return nil, err
	}
	ack, err := c.expect(mqttConnack)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("raw mqtt connect to %s: %w", u.Host, err)
	}
	if len(ack) < 2 || ack[1] != 0 {
		nc.Close()
		return nil, fmt.Errorf("raw mqtt connect to %s refused: %v", u.Host, ack)
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

func (c *rawMQTTConn) subscribe(topic string, qos byte) error {
	_ = c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.nc.SetDeadline(time.Time{})
	body := binary.BigEndian.AppendUint16(nil, 1)
	body = mqttString(body, topic)
	body = append(body, qos)
	if _, err := c.nc.Write(mqttPacket(nil, mqttSubscribe<<4|0x02, body)); err != nil {
		return err
	}
	ack, err := c.expect(mqttSuback)
	if err != nil {
		return err
	}
	if len(ack) < 3 || ack[2] > 2 {
		return fmt.Errorf("subscribe refused: %v", ack)
	}
	return nil
}

// rawMQTTSub is one subscriber and its counters.
type rawMQTTSub struct {
	c    *rawMQTTConn
	got  atomic.Uint64
	hist *histogram
}

func (s rawMQTTScenario) Run(ctx context.Context, rawURL string, p Params) (Result, error) {
	topic := "tridentbench/raw/" + randomSuffix()
	return runRawPhases(rawURL, p, func(r Result) float64 { return r.PublishRate },
		func(rate float64, warmup, measured time.Duration, pid int) (Result, *RawStats, error) {
			return s.phase(ctx, rawURL, topic, p, rate, warmup, measured, pid)
		})
}

// phase connects the subscribers and the publisher, runs warmup+measured
// (unpaced at rate 0, else rate PUBLISHes per second, stamped), verifies
// that every subscriber got everything, and closes the connections.
func (s rawMQTTScenario) phase(ctx context.Context, rawURL, topic string, p Params, rate float64,
	warmup, measured time.Duration, pid int) (Result, *RawStats, error) {
	suffix := randomSuffix()
	subs := make([]*rawMQTTSub, s.subscribers)
	var pub *rawMQTTConn
	defer func() {
		for _, sb := range subs {
			if sb != nil {
				sb.c.nc.Close()
			}
		}
		if pub != nil {
			pub.nc.Close()
		}
	}()
	for i := range subs {
		c, err := rawMQTTDial(rawURL, fmt.Sprintf("tbr-sub-%d-%s", i, suffix))
		if err != nil {
			return Result{}, nil, err
		}
		subs[i] = &rawMQTTSub{c: c}
		if err := c.subscribe(topic, s.qos); err != nil {
			return Result{}, nil, err
		}
		if rate > 0 {
			subs[i].hist = histPool.Get().(*histogram)
			*subs[i].hist = histogram{}
		}
	}
	var err error
	if pub, err = rawMQTTDial(rawURL, "tbr-pub-"+suffix); err != nil {
		return Result{}, nil, err
	}
	var c counters // published: sent (QoS 0) or PUBACKed (QoS 1); consumed: all deliveries
	var sent, acked atomic.Uint64
	g := newGate()
	errc := make(chan error, 4)
	fail := func(err error) { c.fail(errc, err) }
	var wg sync.WaitGroup
	for _, sb := range subs {
		wg.Go(func() { s.subscriber(sb, &c, g, fail) })
	}
	if s.qos == 1 {
		wg.Go(func() { s.pubacks(pub, &acked, g, &c, fail) })
	}
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		s.publish(pub, topic, p, rate, subs, &sent, &acked, g, &c, fail)
	}()
	res, cpu, err := measureRaw(ctx, p, warmup, measured, pid, errc, func(sum *counters) {
		var got uint64
		for _, sb := range subs {
			got += sb.got.Load()
		}
		sum.consumed.Store(got)
		if s.qos == 1 {
			sum.published.Store(acked.Load())
		} else {
			sum.published.Store(sent.Load())
		}
	})
	c.stop.Store(true)
	g.kick()
	<-pubDone
	var verr error
	var dropped uint64
	if err == nil {
		dropped, verr = s.verify(subs, &sent, &acked, 20*time.Second)
	}
	for _, sb := range subs {
		sb.c.nc.Close()
	}
	pub.nc.Close()
	wg.Wait()
	if err != nil {
		return Result{}, nil, err
	}
	if verr != nil {
		return Result{}, nil, verr
	}
	var hists []*histogram
	if rate > 0 {
		for _, sb := range subs {
			hists = append(hists, sb.hist)
		}
	}
	raw := rawStatsOf(cpu, res, rate, hists)
	raw.Dropped = dropped
	return res, raw, nil
}

// verify waits until every subscriber received all that was sent (and, at
// QoS 1, the broker PUBACKed all of it). A broker may drop messages for
// a slow subscriber (Mosquitto does past max_queued_messages, 1000 by
// default, at QoS 1 too): once the publisher's messages are acknowledged
// and no subscriber has received anything for a second, what is missing
// is counted as dropped.
func (s rawMQTTScenario) verify(subs []*rawMQTTSub, sent, acked *atomic.Uint64, timeout time.Duration) (dropped uint64, err error) {
	n := sent.Load()
	total := func() (t uint64) {
		for _, sb := range subs {
			t += sb.got.Load()
		}
		return t
	}
	last, lastAt := total(), time.Now()
	for i, sb := range subs {
		for {
			got := sb.got.Load()
			if got == n && (s.qos == 0 || acked.Load() == n) {
				break
			}
			if got > n {
				return 0, fmt.Errorf("subscriber %d received %d, more than the %d sent", i, got, n)
			}
			// Deliveries still arriving: wait on; none for a second
			// once everything was acknowledged: the rest was dropped;
			// none for timeout: an error.
			if t := total(); t != last {
				last, lastAt = t, time.Now()
			} else if (s.qos == 0 || acked.Load() == n) && time.Since(lastAt) > time.Second {
				return n*uint64(len(subs)) - t, nil
			} else if time.Since(lastAt) > timeout {
				return 0, fmt.Errorf("subscriber %d received %d of %d sent (%d acknowledged)", i, got, n, acked.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return 0, nil
}

// publish writes batches of pre-encoded PUBLISHes while the credit allows:
// at most MaxInFlight sent and not yet received by the slowest
// subscriber, and at QoS 1 at most the confirm window not yet PUBACKed.
func (s rawMQTTScenario) publish(c *rawMQTTConn, topic string, p Params, rate float64, subs []*rawMQTTSub,
	sent, acked *atomic.Uint64, g *gate, cs *counters, fail func(error)) {
	size := max(p.MsgSize, 16)
	var one []byte
	var body []byte
	body = mqttString(body, topic)
	pidAt := len(body)
	if s.qos == 1 {
		body = append(body, 0, 0)
	}
	stampAt := len(body)
	body = append(body, make([]byte, size)...)
	one = mqttPacket(one, mqttPublish<<4|s.qos<<1, body)
	hdr := len(one) - len(body)
	pidAt += hdr
	stampAt += hdr
	batch := make([]byte, 0, len(one)*rawBatch)
	for range rawBatch {
		batch = append(batch, one...)
	}
	maxInFlight := max(p.MaxInFlight, rawBatch)
	window := uint64(min(max(p.ConfirmWindow, rawBatch), 65000))
	credit := func(n, k uint64) bool {
		slowest := ^uint64(0)
		for _, sb := range subs {
			slowest = min(slowest, sb.got.Load())
		}
		if n+k-slowest > maxInFlight {
			return false
		}
		return s.qos == 0 || n+k-acked.Load() <= window
	}
	var pid uint16
	err := rawPublish(rate, &cs.stop, g, sent, credit, func(_, k, stamp uint64) error {
		b := batch[:k*uint64(len(one))]
		for i := range int(k) {
			at := i * len(one)
			if s.qos == 1 {
				pid++
				if pid == 0 {
					pid = 1
				}
				binary.BigEndian.PutUint16(b[at+pidAt:], pid)
			}
			if stamp != 0 {
				binary.LittleEndian.PutUint64(b[at+stampAt:], stamp)
			}
		}
		_, err := c.nc.Write(b)
		return err
	})
	if err != nil {
		fail(fmt.Errorf("publisher: %w", err))
	}
}

// pubacks counts the broker's PUBACKs to the publisher.
func (s rawMQTTScenario) pubacks(c *rawMQTTConn, acked *atomic.Uint64, g *gate, cs *counters, fail func(error)) {
	c.readLoop("publisher connection", &cs.stop, fail, func() (int, error) {
		off := 0
		for {
			first, _, used, ok, err := c.nextPacket(off)
			if err != nil || !ok {
				g.kick()
				return off, err
			}
			off += used
			if first>>4 == mqttPuback {
				acked.Add(1)
			}
		}
	})
}

// subscriber counts PUBLISHes (recording latency in latency phases) and
// at QoS 1 PUBACKs them, all of one read in one write.
func (s rawMQTTScenario) subscriber(sb *rawMQTTSub, cs *counters, g *gate, fail func(error)) {
	c := sb.c
	var acks []byte
	c.readLoop("subscriber", &cs.stop, fail, func() (int, error) {
		off := 0
		var now int64
		if sb.hist != nil {
			now = int64(time.Since(rawEpoch))
		}
		acks = acks[:0]
		var got uint64
		for {
			first, body, used, ok, err := c.nextPacket(off)
			if err != nil {
				return off, err
			}
			if !ok {
				break
			}
			off += used
			if first>>4 != mqttPublish || len(body) < 2 {
				continue
			}
			got++
			at := 2 + int(binary.BigEndian.Uint16(body))
			if (first>>1)&3 > 0 && len(body) >= at+2 {
				acks = append(acks, mqttPuback<<4, 2, body[at], body[at+1])
				at += 2
			}
			if sb.hist != nil && len(body) >= at+8 {
				sb.hist.record(now - int64(binary.LittleEndian.Uint64(body[at:])))
			}
		}
		if got > 0 {
			sb.got.Add(got)
			g.kick()
		}
		if len(acks) > 0 {
			if _, err := c.nc.Write(acks); err != nil {
				return off, err
			}
		}
		return off, nil
	})
}
