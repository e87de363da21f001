package main

// The backlog benchmark (--backlog N, issue 11): what a queue costs when it
// holds a large backlog. One durable queue is filled with N persistent
// messages of --size bytes (random, incompressible bodies) with publisher
// confirms and no consumer; then the broker is killed with SIGKILL and
// restarted; then the queue is drained by one consumer with manual acks.
// It reports the publish rate of each tenth of the fill, the broker's peak
// resident memory (VmHWM) and its resident memory at the end of the fill,
// after the restart and after the drain, the time from the restart until
// the AMQP port serves and until a passive queue.declare returns N, the
// drain rate of each tenth, and the data directory's size at the end of
// the fill, after the drain and --backlog-settle later.
//
// The RabbitMQ anchor (--anchors) gets the same fill and drain with
// --backlog-anchor messages (it cannot be killed and restarted from here);
// its memory is that of its beam.smp process, sampled.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

const backlogQueue = "tridentbench-backlog"

// backlogResult is one broker's figures.
type backlogResult struct {
	name         string
	n            int
	fillTenths   []float64 // msgs/s of each tenth
	fillRate     float64
	drainTenths  []float64
	drainRate    float64
	drained      int
	peakRSS      int64 // bytes (VmHWM, or the highest sample)
	peakAnon     int64 // highest RssAnon sample
	fileFilled   int64 // RssFile at the end of the fill
	rssFilled    int64
	rssRestarted int64
	rssDrained   int64
	toServe      time.Duration // restart → AMQP port accepts
	toCount      time.Duration // restart → passive declare returns n
	countAfter   int
	diskFilled   int64
	diskDrained  int64
	diskSettled  int64
	settle       time.Duration
	restarted    bool
}

func runBacklog(ctx context.Context, o *options) error {
	n := o.backlog
	if o.params.MsgSize < 8 {
		return errors.New("--size must be at least 8 for the backlog benchmark")
	}
	var results []backlogResult
	if o.backlogQuorum {
		done, err := buildTrident(ctx, o)
		if err != nil {
			return err
		}
		defer done()
		r, err := backlogQuorum(ctx, o, n)
		if err != nil {
			return fmt.Errorf("%s: %w", clusterTargetName, err)
		}
		results = append(results, r)
	} else if len(o.targets) == 0 {
		done, err := buildTrident(ctx, o)
		if err != nil {
			return err
		}
		defer done()
		r, err := backlogTrident(ctx, o, n)
		if err != nil {
			return fmt.Errorf("trident: %w", err)
		}
		results = append(results, r)
	}
	if o.anchors {
		if err := runAnchors(ctx); err != nil {
			return err
		}
		r, err := backlogRemote(ctx, o, "rabbitmq", rabbitAnchorURL, min(n, o.backlogAnchor), rabbitPid)
		if err != nil {
			return fmt.Errorf("rabbitmq: %w", err)
		}
		results = append(results, r)
	}
	for _, t := range o.targets {
		r, err := backlogRemote(ctx, o, t.Name, t.URLs["amqp"], n, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		results = append(results, r)
	}
	writeBacklog(os.Stdout, o, results)
	return nil
}

// backlogTrident runs the whole benchmark against a Trident it starts.
func backlogTrident(ctx context.Context, o *options, n int) (backlogResult, error) {
	r := backlogResult{name: "trident", n: n, settle: o.backlogSettle}
	proc, err := testbin.Launch(ctx, testbin.Options{Binary: o.tridentBin, ExtraArgs: o.tridentArgs})
	if err != nil {
		return r, err
	}
	defer proc.Cleanup()
	fmt.Fprintf(os.Stderr, "tridentbench: trident on %s, data %s\n", proc.AMQPAddr, proc.DataDir)
	mem := startRSS(proc.Pid)
	if r.fillTenths, r.fillRate, err = backlogFill(ctx, proc.AMQPURL, n, o.params.MsgSize, nil); err != nil {
		return r, err
	}
	r.rssFilled = rss(proc.Pid())
	r.fileFilled = procStatus(proc.Pid(), "RssFile")
	r.peakRSS = max(hwm(proc.Pid()), mem.stop())
	r.peakAnon = mem.peakAnon
	r.diskFilled = dirSize(proc.DataDir)

	fmt.Fprintln(os.Stderr, "tridentbench: kill -9 and restart")
	if err := proc.Kill(); err != nil {
		return r, err
	}
	start := time.Now()
	if err := proc.Restart(); err != nil { // returns once the AMQP port accepts
		return r, err
	}
	r.toServe = time.Since(start)
	r.restarted = true
	for {
		count, err := passiveCount(proc.AMQPURL)
		if err == nil && count >= n {
			r.countAfter = count
			break
		}
		if time.Since(start) > 10*time.Minute {
			return r, fmt.Errorf("queue holds %d after the restart (%v), want %d", count, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.toCount = time.Since(start)
	r.rssRestarted = rss(proc.Pid())
	mem = startRSS(proc.Pid)
	if r.drainTenths, r.drainRate, r.drained, err = backlogDrain(ctx, proc.AMQPURL, n, o.params.Prefetch, o.params.AckEvery); err != nil {
		return r, err
	}
	r.peakRSS = max(r.peakRSS, hwm(proc.Pid()), mem.stop())
	r.peakAnon = max(r.peakAnon, mem.peakAnon)
	r.rssDrained = rss(proc.Pid())
	r.diskDrained = dirSize(proc.DataDir)
	if o.backlogSettle > 0 {
		fmt.Fprintf(os.Stderr, "tridentbench: waiting %v for the store to give disk back\n", o.backlogSettle)
		select {
		case <-time.After(o.backlogSettle):
		case <-ctx.Done():
			return r, ctx.Err()
		}
		r.diskSettled = dirSize(proc.DataDir)
	}
	return r, proc.Stop()
}

// backlogRemote runs the fill and the drain against a broker at url;
// pid, if set, finds its process for memory figures.
func backlogRemote(ctx context.Context, o *options, name, url string, n int, pid func() int) (backlogResult, error) {
	r := backlogResult{name: name, n: n}
	if pid == nil {
		pid = func() int { return 0 }
	}
	if err := deleteBacklogQueue(url); err != nil {
		return r, err
	}
	mem := startRSS(pid)
	var err error
	if r.fillTenths, r.fillRate, err = backlogFill(ctx, url, n, o.params.MsgSize, nil); err != nil {
		return r, err
	}
	r.rssFilled = rss(pid())
	if r.drainTenths, r.drainRate, r.drained, err = backlogDrain(ctx, url, n, o.params.Prefetch, o.params.AckEvery); err != nil {
		return r, err
	}
	r.rssDrained = rss(pid())
	r.peakRSS = mem.stop()
	r.peakAnon = mem.peakAnon
	return r, deleteBacklogQueue(url)
}

// backlogFill publishes n persistent messages to a new durable queue with
// at most 1000 unconfirmed, and returns the rate of each tenth.
func backlogFill(ctx context.Context, url string, n, size int, args amqp.Table) ([]float64, float64, error) {
	conn, ch, err := openChannel(url, "backlog publisher")
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	if _, err := ch.QueueDeclare(backlogQueue, true, false, false, false, args); err != nil {
		return nil, 0, err
	}
	tenth := max(n/10, 1)
	var tenths []float64
	start, mark := time.Now(), time.Now()
	err = publishConfirmed(ctx, ch, n, size, func(int) string { return backlogQueue }, func(confirmed int) {
		if confirmed%tenth == 0 && len(tenths) < 10 {
			now := time.Now()
			tenths = append(tenths, float64(tenth)/now.Sub(mark).Seconds())
			mark = now
			fmt.Fprintf(os.Stderr, "  fill %3d%%  %s/s\n", 10*len(tenths), human(tenths[len(tenths)-1]))
		}
	})
	if err != nil {
		return nil, 0, err
	}
	return tenths, float64(n) / time.Since(start).Seconds(), nil
}

// publishConfirmed publishes n persistent messages of size random bytes
// (message i to queue(i), its number in its first 8 bytes, so that no two
// are alike and none compresses) with confirms, at most 1000 unconfirmed,
// calling progress after each confirm. A nack is an error.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, n, size int, queue func(int) string, progress func(confirmed int)) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 4096))
	const window = 1000
	blocks := make([][]byte, 64)
	for i := range blocks {
		blocks[i] = make([]byte, size)
		if _, err := io.ReadFull(rand.Reader, blocks[i]); err != nil {
			return err
		}
	}
	confirmed, nacked := 0, 0
	wait := func() error {
		c, ok := <-confirms
		if !ok {
			return errors.New("channel closed while waiting for confirms")
		}
		if !c.Ack {
			nacked++
		}
		confirmed++
		progress(confirmed)
		return nil
	}
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for i-confirmed >= window {
			if err := wait(); err != nil {
				return err
			}
		}
		body := blocks[i%len(blocks)]
		binary.BigEndian.PutUint64(body, uint64(i))
		if err := ch.PublishWithContext(ctx, "", queue(i), false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}); err != nil {
			return err
		}
	}
	for confirmed < n {
		if err := wait(); err != nil {
			return err
		}
	}
	if nacked > 0 {
		return fmt.Errorf("%d of %d publishes nacked", nacked, n)
	}
	return nil
}

// backlogDrain consumes the queue to empty with manual acks (multiple
// every ackEvery) and returns the rate of each tenth and the count.
func backlogDrain(ctx context.Context, url string, n, prefetch, ackEvery int) ([]float64, float64, int, error) {
	conn, ch, err := openChannel(url, "backlog consumer")
	if err != nil {
		return nil, 0, 0, err
	}
	defer conn.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, 0, 0, err
	}
	ds, err := ch.Consume(backlogQueue, "", false, false, false, false, nil)
	if err != nil {
		return nil, 0, 0, err
	}
	tenth := max(n/10, 1)
	var tenths []float64
	got := 0
	start, mark := time.Now(), time.Now()
	idle := time.NewTimer(30 * time.Second)
	defer idle.Stop()
	for got < n {
		select {
		case d, ok := <-ds:
			if !ok {
				return nil, 0, got, errors.New("consumer channel closed")
			}
			got++
			if got%ackEvery == 0 || got == n {
				if err := d.Ack(true); err != nil {
					return nil, 0, got, err
				}
			}
			if got%tenth == 0 && len(tenths) < 10 {
				now := time.Now()
				tenths = append(tenths, float64(tenth)/now.Sub(mark).Seconds())
				mark = now
				fmt.Fprintf(os.Stderr, "  drain %3d%%  %s/s\n", 10*len(tenths), human(tenths[len(tenths)-1]))
			}
			idle.Reset(30 * time.Second)
		case <-idle.C:
			return tenths, 0, got, fmt.Errorf("drain stalled at %d of %d", got, n)
		case <-ctx.Done():
			return nil, 0, got, ctx.Err()
		}
	}
	rate := float64(got) / time.Since(start).Seconds()
	// Wait for the last acks to land before the caller measures.
	if _, err := ch.QueueDeclarePassive(backlogQueue, true, false, false, false, nil); err != nil {
		return nil, 0, got, err
	}
	return tenths, rate, got, nil
}

// openChannel opens a connection (dial, amqp.go) and a channel on it.
func openChannel(url, name string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := dial(url, name)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

func passiveCount(url string) (int, error) {
	conn, ch, err := openChannel(url, "backlog count")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	q, err := ch.QueueDeclarePassive(backlogQueue, true, false, false, false, nil)
	return q.Messages, err
}

func deleteBacklogQueue(url string) error {
	conn, ch, err := openChannel(url, "backlog delete")
	if err != nil {
		return err
	}
	defer conn.Close()
	return deleteQueue(conn, ch, backlogQueue)
}

// procStatus reads a field of /proc/pid/status in bytes (kB in the file).
func procStatus(pid int, field string) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func rss(pid int) int64 { return procStatus(pid, "VmRSS") }
func hwm(pid int) int64 { return procStatus(pid, "VmHWM") }

// rssSampler keeps the highest resident size seen every 100 ms, and the
// highest anonymous part of it (RssAnon: the process's own memory, without
// the pages of files it maps, which the kernel reclaims as page cache).
type rssSampler struct {
	stopc    chan struct{}
	wg       sync.WaitGroup
	peak     int64
	peakAnon int64
}

func startRSS(pid func() int) *rssSampler {
	s := &rssSampler{stopc: make(chan struct{})}
	s.wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			p := pid()
			s.peak = max(s.peak, rss(p))
			s.peakAnon = max(s.peakAnon, procStatus(p, "RssAnon"))
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *rssSampler) stop() int64 {
	close(s.stopc)
	s.wg.Wait()
	return s.peak
}

// rabbitPid finds the anchor RabbitMQ's Erlang VM.
func rabbitPid() int {
	out, err := exec.Command("pgrep", "-f", "beam.smp.*rabbit").Output()
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.Fields(string(out) + " 0")[0])
	return pid
}

// dirSize is the disk space the files under dir take (allocated blocks).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512 // on disk: preallocated files are sparse
				} else {
					n += fi.Size()
				}
			}
		}
		return nil
	})
	return n
}

// mib formats a byte count, "–" for none.
func mib(b int64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

func writeBacklog(w io.Writer, o *options, rs []backlogResult) {
	tenths := func(ts []float64) string {
		var parts []string
		lo, hi := 0.0, 0.0
		for i, t := range ts {
			parts = append(parts, human(t))
			if i == 0 || t < lo {
				lo = t
			}
			hi = max(hi, t)
		}
		if hi == 0 {
			return "–"
		}
		return fmt.Sprintf("%s (slowest/fastest %.2f)", strings.Join(parts, " "), lo/hi)
	}
	fmt.Fprintf(w, "backlog: one durable queue, %d-byte random bodies, persistent, confirms (window 1000), no consumer; "+
		"then kill -9 and restart (trident only); then one consumer, prefetch %d, ack multiple every %d\n\n",
		o.params.MsgSize, o.params.Prefetch, o.params.AckEvery)
	for _, r := range rs {
		fmt.Fprintf(w, "%s, %d messages\n", r.name, r.n)
		fmt.Fprintf(w, "  fill          %s/s; tenths %s\n", human(r.fillRate), tenths(r.fillTenths))
		fmt.Fprintf(w, "  peak RSS      %s (filled %s, restarted %s, drained %s)\n", mib(r.peakRSS), mib(r.rssFilled), mib(r.rssRestarted), mib(r.rssDrained))
		fmt.Fprintf(w, "  peak anon     %s (RssAnon: without mapped files; mapped store files at the end of the fill: %s)\n", mib(r.peakAnon), mib(r.fileFilled))
		if r.restarted {
			fmt.Fprintf(w, "  restart       AMQP port serves after %v, passive declare returns %d after %v\n",
				r.toServe.Round(time.Millisecond), r.countAfter, r.toCount.Round(time.Millisecond))
		}
		fmt.Fprintf(w, "  drain         %s/s, %d of %d messages; tenths %s\n", human(r.drainRate), r.drained, r.n, tenths(r.drainTenths))
		if r.diskFilled > 0 {
			fmt.Fprintf(w, "  data dir      %s filled, %s drained", mib(r.diskFilled), mib(r.diskDrained))
			if r.settle > 0 {
				fmt.Fprintf(w, ", %s after %v more", mib(r.diskSettled), r.settle)
			}
			fmt.Fprintln(w)
		}
	}
}
