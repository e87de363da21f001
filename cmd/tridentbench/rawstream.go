package main

// The stream benchmark's raw clients (--stream N --stream-raw): the same
// steps as stream.go's, with the raw AMQP codec of rawamqp.go in place of
// amqp091-go, so that the figures are the broker's, not the client's.
//
//	publish 1→1   the raw-amqp-stream-confirm scenario (no latency phases)
//	fill          one publisher writing pre-encoded batches of rawBatch
//	              messages (distinct random bodies), confirms pipelined
//	              within --confirm-window, until all N are confirmed
//	read x1/x10   readers from first, each its own connection, scanning
//	              frames without decoding them, acking multiple every
//	              --ack-every (a stream takes acks as credit)
//	replay        one reader from an AMQP timestamp; the first delivery's
//	              header is decoded for its x-stream-offset

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/trident-broker/trident/protocol/amqp/wire"
)

// rawStreamFill publishes n messages of p.MsgSize bytes into q with
// confirms; progress is called with the confirmed count as it grows
// (about every rawBatch). It returns the fill rate.
func rawStreamFill(ctx context.Context, url, q string, n int, p Params, progress func(confirmed int)) (float64, error) {
	c, err := rawDial(url)
	if err != nil {
		return 0, err
	}
	pr := &rawPair{queue: q, pub: c, gate: newGate(), errc: make(chan error, 4)}
	if err := c.rpc(&wire.ConfirmSelect{}); err != nil {
		pr.close()
		return 0, err
	}
	var readers sync.WaitGroup
	readers.Add(1)
	go func() { defer readers.Done(); pr.readConfirms() }()
	defer func() {
		pr.c.stop.Store(true) // the confirm reader's error on close is expected
		pr.close()
		readers.Wait()
	}()

	size := max(p.MsgSize, 16)
	props := wire.Properties{DeliveryMode: 2}
	var batch []byte
	var frameLen int
	for range rawBatch {
		body := make([]byte, size)
		_, _ = rand.Read(body)
		start := len(batch)
		batch, _ = wire.AppendMethodFrame(batch, 1, &wire.BasicPublish{RoutingKey: q})
		batch, _ = wire.AppendHeaderFrame(batch, 1, uint64(size), &props)
		batch = wire.AppendFrame(batch, wire.FrameBody, 1, body)
		frameLen = len(batch) - start
	}
	window := uint64(max(p.ConfirmWindow, rawBatch))
	var sent uint64
	start := time.Now()
	last := 0
	for {
		settled := pr.confirmed.Load() + pr.c.nacked.Load()
		if c := int(pr.confirmed.Load()); c/rawBatch != last/rawBatch || c == n {
			progress(c)
			last = c
		}
		if settled == uint64(n) {
			break
		}
		select {
		case err := <-pr.errc:
			return 0, err
		default:
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		k := min(uint64(n)-sent, rawBatch)
		if k == 0 || sent+k-settled > window {
			ok := func() bool {
				s := pr.confirmed.Load() + pr.c.nacked.Load()
				return s == uint64(n) || (k > 0 && sent+k-s <= window)
			}
			pr.gate.wait(ok, &pr.c.stop)
			continue
		}
		if _, err := c.nc.Write(batch[:int(k)*frameLen]); err != nil {
			return 0, err
		}
		sent += k
	}
	if nk := pr.c.nacked.Load(); nk > 0 {
		return 0, fmt.Errorf("fill: %d publishes nacked", nk)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// rawRead is what one raw reader saw.
type rawRead struct {
	got         int
	toFirst     time.Duration // basic.consume-ok to the first delivery
	firstOffset int64         // the first delivery's x-stream-offset
	firstAt     time.Time
	lastAt      time.Time
}

// rawStreamRead reads q from the offset spec in args on its own
// connection: n deliveries if n > 0, else for dur after the first (or
// until a second passes without one).
func rawStreamRead(ctx context.Context, url, q string, args wire.Table, n int, dur time.Duration, p Params) (rawRead, error) {
	var r rawRead
	c, err := rawDial(url)
	if err != nil {
		return r, err
	}
	defer c.nc.Close()
	if err := c.rpc(&wire.BasicQos{PrefetchCount: uint16(min(p.Prefetch, 65535))}); err != nil {
		return r, err
	}
	ackEvery := max(p.AckEvery, 1)
	var ackBuf []byte
	acked := 0
	if err := c.send(1, &wire.BasicConsume{Queue: q, ConsumerTag: "raw", Arguments: args}); err != nil {
		return r, err
	}
	if _, err := c.expect(1, "basic.consume-ok"); err != nil {
		return r, err
	}
	start := time.Now()
	buf := make([]byte, 256<<10)
	have, _ := c.r.Read(buf[:c.r.Buffered()])
	wantHeader := false
	var end time.Time
	for n <= 0 || r.got < n {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		idle := 30 * time.Second
		if r.got > 0 && n <= 0 {
			idle = time.Second
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(idle))
		k, err := c.nc.Read(buf[have:])
		if k > 0 {
			now := time.Now()
			have += k
			off := 0
			for {
				f, used, perr := wire.ParseFrame(buf[off:have], 0)
				if perr != nil {
					if errors.Is(perr, io.ErrUnexpectedEOF) {
						break
					}
					return r, perr
				}
				off += used
				switch f.Type {
				case wire.FrameMethod:
					if len(f.Payload) >= 4 && binary.BigEndian.Uint16(f.Payload) == wire.ClassBasic &&
						binary.BigEndian.Uint16(f.Payload[2:]) == wire.MethodBasicDeliver {
						if r.got == 0 {
							r.toFirst, r.firstAt = now.Sub(start), now
							wantHeader = true
							if n <= 0 {
								end = now.Add(dur)
							}
						}
						r.got++
						r.lastAt = now
					} else if err := unexpectedMethod(f.Payload); err != nil {
						return r, err
					}
				case wire.FrameHeader:
					if wantHeader {
						wantHeader = false
						_, _, props, err := wire.DecodeContentHeader(f.Payload)
						if err != nil {
							return r, err
						}
						r.firstOffset, _ = props.Headers["x-stream-offset"].(int64)
					}
				}
			}
			copy(buf, buf[off:have])
			have -= off
			if have == len(buf) {
				buf = append(buf, make([]byte, len(buf))...)
			}
			if r.got-acked >= ackEvery {
				ackBuf, _ = wire.AppendMethodFrame(ackBuf[:0], 1, &wire.BasicAck{DeliveryTag: uint64(r.got), Multiple: true})
				if _, err := c.nc.Write(ackBuf); err != nil {
					return r, err
				}
				acked = r.got
			}
			if n <= 0 && !end.IsZero() && now.After(end) {
				return r, nil
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && n <= 0 && r.got > 0 {
				return r, nil // the end of the stream
			}
			return r, fmt.Errorf("stream reader after %d deliveries: %w", r.got, err)
		}
	}
	return r, nil
}

// rawStreamReadAll has k raw readers, each on its own connection, read
// all n messages of q from first; it returns the total rate.
func rawStreamReadAll(ctx context.Context, url, q string, k, n int, p Params) (float64, error) {
	errc := make(chan error, k)
	var wg sync.WaitGroup
	start := time.Now()
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rawStreamRead(ctx, url, q, wire.Table{"x-stream-offset": "first"}, n, 0, p)
			errc <- err
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return 0, err
		}
	}
	return float64(k*n) / time.Since(start).Seconds(), nil
}

// rawStreamReplay reads q from timestamp ts for p.Duration: the time to
// the first delivery, its offset, and the rate after it.
func rawStreamReplay(ctx context.Context, url, q string, ts time.Time, p Params) (time.Duration, int64, float64, error) {
	r, err := rawStreamRead(ctx, url, q, wire.Table{"x-stream-offset": ts.UTC()}, 0, p.Duration, p)
	if err != nil {
		return 0, 0, 0, err
	}
	if r.got == 0 {
		return 0, 0, 0, errors.New("no delivery from the timestamp")
	}
	rate := 0.0
	if secs := r.lastAt.Sub(r.firstAt).Seconds(); secs > 0 {
		rate = float64(r.got-1) / secs
	}
	return r.toFirst, r.firstOffset, rate, nil
}
