package main

// The stream benchmark (--stream N, issue 12): streams (x-queue-type:
// stream) over AMQP 0-9-1, Trident and the RabbitMQ anchor in the same run.
// With --stream-raw every step uses the raw clients (rawstream.go).
//
//	publish 1→1   one publisher with confirms (window --confirm-window) into a
//	              fresh stream and one consumer reading from next, for
//	              --warmup + --duration: confirmed/s and consumed/s
//	fill          N messages of --size random bytes into another stream
//	              (confirms, window 1000); the time at half the fill is noted
//	read x1       (not with --stream-no-reads) one consumer from first reads all N (prefetch --prefetch,
//	              ack multiple every --ack-every): msgs/s
//	read x10      ten consumers, each its own connection, from first, each
//	              reads all N: total msgs/s; the broker's peak RSS meanwhile
//	replay        a consumer from the AMQP timestamp of half the fill: time
//	              from basic.consume to the first delivery, its offset, then
//	              msgs/s over the next --duration
//
// The anchor gets min(N, --stream-anchor) messages. Memory is Trident's
// process (VmRSS sampled every 100 ms, and VmHWM) and RabbitMQ's beam.smp.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

type streamResult struct {
	name                  string
	n                     int
	pubRate, pubConsRate  float64
	fillRate              float64
	read1Rate, read10Rate float64
	read10Peak            int64 // RSS during read x10
	peakRSS               int64
	toFirst               time.Duration
	firstOffset           int64
	replayRate            float64
}

func runStreamBench(ctx context.Context, o *options) error {
	n := o.stream
	if o.params.MsgSize < 8 {
		return errors.New("--size must be at least 8 for the stream benchmark")
	}
	var results []streamResult
	if len(o.targets) == 0 {
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
		r, err := streamTarget(ctx, o, "trident", proc.AMQPURL, n, proc.Pid)
		if err != nil {
			_ = proc.Stop()
			return fmt.Errorf("trident: %w", err)
		}
		r.peakRSS = max(r.peakRSS, hwm(proc.Pid()))
		results = append(results, r)
		if err := proc.Stop(); err != nil {
			return err
		}
	}
	for _, t := range o.targets {
		r, err := streamTarget(ctx, o, t.Name, t.URLs["amqp"], n, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		results = append(results, r)
	}
	if o.anchors {
		if err := runAnchors(ctx); err != nil {
			return err
		}
		r, err := streamTarget(ctx, o, "rabbitmq", rabbitAnchorURL, min(n, o.streamAnchor), rabbitPid)
		if err != nil {
			return fmt.Errorf("rabbitmq: %w", err)
		}
		results = append(results, r)
	}
	writeStream(os.Stdout, o, results)
	return nil
}

func streamTarget(ctx context.Context, o *options, name, url string, n int, pid func() int) (r streamResult, err error) {
	r = streamResult{name: name, n: n}
	if pid == nil {
		pid = func() int { return 0 }
	}
	p := o.params
	mem := startRSS(pid)
	defer func() { r.peakRSS = max(r.peakRSS, mem.stop()) }()
	fillQ := "tridentbench-stream-" + randomSuffix()
	if err := declareStreamQueue(url, fillQ); err != nil {
		return r, err
	}
	defer deleteStreamQueue(url, fillQ)

	// The steps, with amqp091-go or with the raw clients (rawstream.go).
	pub1to1, read, replay := streamPublish1to1, streamRead, streamReplay
	if o.streamRaw {
		pub1to1, read, replay = rawStreamPublish1to1, rawStreamReadAll, rawStreamReplay
	}
	fmt.Fprintf(os.Stderr, "%s: publish 1→1 with confirms ... ", name)
	if r.pubRate, r.pubConsRate, err = pub1to1(ctx, url, p); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "pub %s/s cons %s/s\n", human(r.pubRate), human(r.pubConsRate))

	fmt.Fprintf(os.Stderr, "%s: fill %d ...\n", name, n)
	var mid time.Time
	tenth := 0
	progress := func(c int) {
		if c >= n/2 && mid.IsZero() {
			mid = time.Now()
		}
		if t := 10 * c / max(n, 1); t > tenth {
			tenth = t
			fmt.Fprintf(os.Stderr, "  fill %3d%%\n", 10*t)
		}
	}
	if o.streamRaw {
		r.fillRate, err = rawStreamFill(ctx, url, fillQ, n, p, progress)
	} else {
		r.fillRate, err = streamFill(ctx, url, fillQ, n, p, progress)
	}
	if err != nil {
		return r, err
	}
	filled := time.Now()

	if !o.streamNoReads {
		fmt.Fprintf(os.Stderr, "%s: read x1 ... ", name)
		if r.read1Rate, err = read(ctx, url, fillQ, 1, n, p); err != nil {
			return r, err
		}
		fmt.Fprintf(os.Stderr, "%s/s\n", human(r.read1Rate))
		fmt.Fprintf(os.Stderr, "%s: read x10 ... ", name)
		m10 := startRSS(pid)
		r.read10Rate, err = read(ctx, url, fillQ, 10, n, p)
		r.read10Peak = m10.stop()
		if err != nil {
			return r, err
		}
		fmt.Fprintf(os.Stderr, "%s/s, RSS peak %s\n", human(r.read10Rate), mib(r.read10Peak))
	}

	// AMQP timestamps are whole seconds: the first second after mid, if
	// the fill went on past it, else the second mid is in.
	ts := time.Unix(mid.Unix()+1, 0)
	if !ts.Before(filled) {
		ts = time.Unix(mid.Unix(), 0)
	}
	fmt.Fprintf(os.Stderr, "%s: replay from %s ... ", name, ts.Format(time.TimeOnly))
	if r.toFirst, r.firstOffset, r.replayRate, err = replay(ctx, url, fillQ, ts, p); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "first after %v (offset %d), then %s/s\n", r.toFirst.Round(time.Microsecond), r.firstOffset, human(r.replayRate))
	return r, nil
}

func declareStreamQueue(url, q string) error {
	conn, ch, err := openChannel(url, "stream declare")
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "stream"})
	return err
}

func deleteStreamQueue(url, q string) error {
	conn, ch, err := openChannel(url, "stream delete")
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = ch.QueueDelete(q, false, false, false)
	return err
}

// streamPublish1to1 is the amqp-stream-1-1 scenario: one confirming
// publisher and one consumer from next, for p.Warmup + p.Duration.
func streamPublish1to1(ctx context.Context, url string, p Params) (pubRate, consRate float64, err error) {
	res, err := amqpScenario{name: "amqp-stream-1-1", confirms: true, stream: true}.Run(ctx, url, p)
	return res.PublishRate, res.ConsumeRate, err
}

// streamFill publishes n messages into q with amqp091-go and confirms.
func streamFill(ctx context.Context, url, q string, n int, p Params, progress func(int)) (float64, error) {
	conn, ch, err := openChannel(url, "stream fill")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	if err := publishConfirmed(ctx, ch, n, p.MsgSize, func(int) string { return q }, progress); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// rawStreamPublish1to1 is the raw-amqp-stream-confirm scenario's
// saturation phase.
func rawStreamPublish1to1(ctx context.Context, url string, p Params) (pubRate, consRate float64, err error) {
	p.LatencyRates = nil
	res, err := rawAMQPScenario{name: "raw-amqp-stream-confirm", persistent: true, stream: true}.Run(ctx, url, p)
	return res.PublishRate, res.ConsumeRate, err
}

// streamRead has k consumers, each on its own connection, read n messages
// from first; it returns the total rate.
func streamRead(ctx context.Context, url, q string, k, n int, p Params) (float64, error) {
	errc := make(chan error, k)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < k; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- readN(ctx, url, q, n, p, amqp.Table{"x-stream-offset": "first"})
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

func readN(ctx context.Context, url, q string, n int, p Params, args amqp.Table) error {
	conn, ch, err := openChannel(url, "stream reader")
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Qos(p.Prefetch, 0, false); err != nil {
		return err
	}
	ds, err := ch.Consume(q, "", false, false, false, false, args)
	if err != nil {
		return err
	}
	defer drain(ds)
	idle := time.NewTimer(30 * time.Second)
	defer idle.Stop()
	for got := 0; got < n; {
		select {
		case d, ok := <-ds:
			if !ok {
				return errors.New("consumer channel closed")
			}
			got++
			if got%p.AckEvery == 0 {
				if err := d.Ack(true); err != nil {
					return err
				}
			}
			idle.Reset(30 * time.Second)
		case <-idle.C:
			return errors.New("read stalled")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// streamReplay consumes from timestamp ts: the time to the first delivery,
// its offset, and the rate over the next p.Duration.
func streamReplay(ctx context.Context, url, q string, ts time.Time, p Params) (time.Duration, int64, float64, error) {
	conn, ch, err := openChannel(url, "stream replay")
	if err != nil {
		return 0, 0, 0, err
	}
	defer conn.Close()
	if err := ch.Qos(p.Prefetch, 0, false); err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	ds, err := ch.Consume(q, "", false, false, false, false, amqp.Table{"x-stream-offset": ts})
	if err != nil {
		return 0, 0, 0, err
	}
	defer drain(ds)
	var first time.Duration
	var off int64
	select {
	case d := <-ds:
		first = time.Since(start)
		off, _ = d.Headers["x-stream-offset"].(int64)
	case <-time.After(30 * time.Second):
		return 0, 0, 0, errors.New("no delivery from the timestamp")
	}
	got := 1
	end := time.Now().Add(p.Duration)
	t0 := time.Now()
	for time.Now().Before(end) {
		select {
		case d, ok := <-ds:
			if !ok {
				return first, off, 0, errors.New("consumer channel closed")
			}
			got++
			if got%p.AckEvery == 0 {
				_ = d.Ack(true)
			}
		case <-time.After(time.Second):
			end = time.Now() // the end of the stream
		}
	}
	return first, off, float64(got-1) / time.Since(t0).Seconds(), nil
}

func writeStream(w io.Writer, o *options, rs []streamResult) {
	client, fillWindow := "amqp091-go", "1000"
	if o.streamRaw {
		client, fillWindow = "raw clients", fmt.Sprint(max(o.params.ConfirmWindow, rawBatch))
	}
	fmt.Fprintf(w, "stream benchmark: x-queue-type stream over AMQP 0-9-1 (%s), %d-byte bodies; "+
		"consumers prefetch %d, ack multiple every %d; confirm window %d (publish 1→1), %s (fill)\n\n",
		client, o.params.MsgSize, o.params.Prefetch, o.params.AckEvery, o.params.ConfirmWindow, fillWindow)
	var base *streamResult
	for i := range rs {
		if rs[i].name == baselineName {
			base = &rs[i]
		}
	}
	ratio := func(v, b float64) string {
		if base == nil || b == 0 {
			return ""
		}
		return fmt.Sprintf("  (%.1f× rabbitmq)", v/b)
	}
	for _, r := range rs {
		var b streamResult
		if base != nil {
			b = *base
		}
		fmt.Fprintf(w, "%s, %d messages in the stream\n", r.name, r.n)
		fmt.Fprintf(w, "  publish 1→1   confirmed %s/s, consumed %s/s%s\n", human(r.pubRate), human(r.pubConsRate), ratio(r.pubRate, b.pubRate))
		fmt.Fprintf(w, "  fill          %s/s%s\n", human(r.fillRate), ratio(r.fillRate, b.fillRate))
		if !o.streamNoReads {
			fmt.Fprintf(w, "  read x1       %s/s from first%s\n", human(r.read1Rate), ratio(r.read1Rate, b.read1Rate))
			fmt.Fprintf(w, "  read x10      %s/s in total from first%s; RSS peak meanwhile %s\n", human(r.read10Rate), ratio(r.read10Rate, b.read10Rate), mib(r.read10Peak))
		}
		fmt.Fprintf(w, "  replay        first message %v after basic.consume (offset %d), then %s/s\n",
			r.toFirst.Round(time.Microsecond), r.firstOffset, human(r.replayRate))
		fmt.Fprintf(w, "  peak RSS      %s\n", mib(r.peakRSS))
	}
}

// drain takes what is still delivered to ds until its channel closes:
// amqp091-go's Connection.Close waits while deliveries are not taken.
func drain(ds <-chan amqp.Delivery) {
	go func() {
		for range ds {
		}
	}()
}
