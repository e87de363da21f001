package main

// The many-queues benchmark (--many-queues Q, issue 11): Q durable queues
// with --many-queues-each messages each (persistent, --size bytes, random),
// declared and filled with confirms; then kill -9 and restart. It reports
// the declare and fill rates, peak resident memory (and its anonymous
// part), the time from the restart until the AMQP port serves and until
// passive declares of a sample of queues all return their counts, resident
// memory after the restart, and the data directory's size.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/trident-broker/trident/test/testbin"
)

func manyQueueName(i int) string { return fmt.Sprintf("tridentbench-mq-%06d", i) }

func runManyQueues(ctx context.Context, o *options) error {
	done, err := buildTrident(ctx, o)
	if err != nil {
		return err
	}
	defer done()
	nq, each := o.manyQueues, o.manyQueuesEach
	proc, err := testbin.Launch(ctx, testbin.Options{Binary: o.tridentBin, ExtraArgs: o.tridentArgs})
	if err != nil {
		return err
	}
	defer proc.Cleanup()
	fmt.Fprintf(os.Stderr, "tridentbench: trident on %s, data %s\n", proc.AMQPAddr, proc.DataDir)
	mem := startRSS(proc.Pid)

	// Declare with 8 channels at once.
	start := time.Now()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			conn, ch, err := openChannel(proc.AMQPURL, "many-queues declare")
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			for i := w; i < nq; i += workers {
				if _, err := ch.QueueDeclare(manyQueueName(i), true, false, false, false, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("declare: %w", err)
	}
	declared := time.Since(start)
	fmt.Fprintf(os.Stderr, "tridentbench: %d queues declared in %v\n", nq, declared.Round(time.Millisecond))

	start = time.Now()
	if err := manyFill(ctx, proc.AMQPURL, nq, each, o.params.MsgSize); err != nil {
		return err
	}
	filled := time.Since(start)
	rssFilled, fileFilled := rss(proc.Pid()), procStatus(proc.Pid(), "RssFile")
	peak := max(hwm(proc.Pid()), mem.stop())
	peakAnon := mem.peakAnon
	disk := dirSize(proc.DataDir)

	fmt.Fprintln(os.Stderr, "tridentbench: kill -9 and restart")
	if err := proc.Kill(); err != nil {
		return err
	}
	start = time.Now()
	if err := proc.Restart(); err != nil {
		return err
	}
	toServe := time.Since(start)
	sample := []int{0, nq / 2, nq - 1}
	for i := 1; i <= 97 && i < nq; i++ {
		sample = append(sample, i*nq/98)
	}
	if err := manyCounts(proc.AMQPURL, sample, each); err != nil {
		return err
	}
	toCount := time.Since(start)
	rssRestarted, anonRestarted := rss(proc.Pid()), procStatus(proc.Pid(), "RssAnon")

	w := os.Stdout
	fmt.Fprintf(w, "many queues: %d durable queues × %d persistent %d-byte messages (confirms), then kill -9 and restart\n\n", nq, each, o.params.MsgSize)
	fmt.Fprintf(w, "trident\n")
	fmt.Fprintf(w, "  declare       %v (%s queues/s)\n", declared.Round(time.Millisecond), human(float64(nq)/declared.Seconds()))
	fmt.Fprintf(w, "  fill          %v (%s msgs/s)\n", filled.Round(time.Millisecond), human(float64(nq*each)/filled.Seconds()))
	fmt.Fprintf(w, "  peak RSS      %s (anonymous %s; filled %s, mapped store files %s)\n", mib(peak), mib(peakAnon), mib(rssFilled), mib(fileFilled))
	fmt.Fprintf(w, "  restart       AMQP port serves after %v; %d sampled queues report %d each after %v\n",
		toServe.Round(time.Millisecond), len(sample), each, toCount.Round(time.Millisecond))
	fmt.Fprintf(w, "  after restart RSS %s (anonymous %s)\n", mib(rssRestarted), mib(anonRestarted))
	fmt.Fprintf(w, "  data dir      %s\n", mib(disk))
	return proc.Stop()
}

// manyFill publishes each messages to every queue, round-robin over the
// queues, with confirms.
func manyFill(ctx context.Context, url string, nq, each, size int) error {
	conn, ch, err := openChannel(url, "many-queues publisher")
	if err != nil {
		return err
	}
	defer conn.Close()
	n := nq * each
	return publishConfirmed(ctx, ch, n, size, func(i int) string { return manyQueueName(i % nq) }, func(confirmed int) {
		if confirmed%max(n/10, 1) == 0 {
			fmt.Fprintf(os.Stderr, "  fill %3d%%\n", 100*confirmed/n)
		}
	})
}

// manyCounts waits until a passive declare of every sampled queue returns
// want messages.
func manyCounts(url string, sample []int, want int) error {
	deadline := time.Now().Add(10 * time.Minute)
	for _, i := range sample {
		for {
			conn, ch, err := openChannel(url, "many-queues count")
			if err == nil {
				q, qerr := ch.QueueDeclarePassive(manyQueueName(i), true, false, false, false, nil)
				conn.Close()
				if qerr == nil && q.Messages == want {
					break
				}
				err = qerr
				if err == nil {
					err = fmt.Errorf("%d messages", q.Messages)
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("queue %s after the restart: %v, want %d messages", manyQueueName(i), err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
