package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// What the raw-protocol scenarios (rawamqp.go) measure beside throughput:
// the CPU the broker and this process used over the measured interval,
// the broker's CPU per message, and publish-to-deliver latency at offered
// rates below saturation.

// RawStats are the raw scenarios' extra figures for one run.
type RawStats struct {
	// BrokerCores and ClientCores are CPU seconds per second over the
	// saturation interval (user + system), of the broker process (found by
	// its listening port) and of tridentbench itself.
	BrokerCores float64 `json:"broker_cores"`
	ClientCores float64 `json:"client_cores"`
	// BrokerNsPerMsg is the broker's CPU time per consumed message.
	BrokerNsPerMsg float64 `json:"broker_cpu_ns_per_msg"`
	// ConfirmFrames and Confirmed count the publisher-confirm frames the
	// broker sent and the messages they confirmed, over the whole run.
	ConfirmFrames uint64 `json:"confirm_frames,omitempty"`
	Confirmed     uint64 `json:"confirmed,omitempty"`
	// Dropped counts the deliveries MQTT subscribers never got (a broker
	// may drop messages for a slow subscriber, as Mosquitto does), over
	// the saturation phase.
	Dropped uint64 `json:"dropped,omitempty"`
	// Latency holds one entry per offered rate.
	Latency []LatencyPoint `json:"latency,omitempty"`
}

// LatencyPoint is publish-to-deliver latency at one offered rate: the time
// from just before the publisher's write of a batch to the consumer's read
// that brought the delivery in.
type LatencyPoint struct {
	Percent  int     `json:"percent_of_saturation"`
	Offered  float64 `json:"offered_per_sec"`
	Achieved float64 `json:"consumed_per_sec"`
	P50      float64 `json:"p50_us"`
	P99      float64 `json:"p99_us"`
	P999     float64 `json:"p999_us"`
	Max      float64 `json:"max_us"`
	Samples  uint64  `json:"samples"`
}

// cpuTicks is user+system time of pid (0: this process) in clock ticks.
func cpuTicks(pid int) (int64, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after its ')' are plain.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: short", path)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)  // utime, field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: bad utime/stime", path)
	}
	return u + st, nil
}

// clockTick is USER_HZ, 100 on Linux everywhere this runs.
const clockTick = 100

// cpuMeter measures broker and client CPU between start and stop.
type cpuMeter struct {
	pid            int
	b0, c0         int64
	t0             time.Time
	brokerOK       bool
	broker, client float64 // cores
}

func startCPU(pid int) *cpuMeter {
	m := &cpuMeter{pid: pid, t0: time.Now()}
	if pid > 0 {
		if t, err := cpuTicks(pid); err == nil {
			m.b0, m.brokerOK = t, true
		}
	}
	m.c0, _ = cpuTicks(0)
	return m
}

func (m *cpuMeter) stop() {
	secs := time.Since(m.t0).Seconds()
	if m.brokerOK {
		if t, err := cpuTicks(m.pid); err == nil {
			m.broker = float64(t-m.b0) / clockTick / secs
		} else {
			m.brokerOK = false
		}
	}
	if t, err := cpuTicks(0); err == nil {
		m.client = float64(t-m.c0) / clockTick / secs
	}
}

// histogram counts latencies in microseconds: 1 µs buckets up to 100 ms,
// the rest in one overflow bucket (with the maximum kept exactly). One
// goroutine records; merge after it stopped.
type histogram struct {
	counts [100_000]uint32
	over   uint64
	n      uint64
	max    int64 // ns
}

func (h *histogram) record(ns int64) {
	if ns < 0 {
		ns = 0
	}
	if us := ns / 1000; us < int64(len(h.counts)) {
		h.counts[us]++
	} else {
		h.over++
	}
	h.n++
	if ns > h.max {
		h.max = ns
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.over += o.over
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile is the latency in µs below which a fraction q of the samples lie.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	want := uint64(q * float64(h.n))
	if want >= h.n {
		want = h.n - 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += uint64(c)
		if seen > want {
			return float64(i) + 0.5
		}
	}
	return float64(h.max) / 1000
}

// gate parks a publisher until a reader says there may be credit again.
type gate struct {
	waiting atomic.Bool
	c       chan struct{}
}

func newGate() *gate { return &gate{c: make(chan struct{}, 1)} }

// wait returns once ok() holds or stop is set.
func (g *gate) wait(ok func() bool, stop *atomic.Bool) {
	for !ok() && !stop.Load() {
		g.waiting.Store(true)
		if ok() || stop.Load() {
			g.waiting.Store(false)
			return
		}
		select {
		case <-g.c:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kick wakes a waiting publisher; cheap when none waits.
func (g *gate) kick() {
	if g.waiting.Load() && g.waiting.CompareAndSwap(true, false) {
		select {
		case g.c <- struct{}{}:
		default:
		}
	}
}

var histPool = sync.Pool{New: func() any { return new(histogram) }}

// rawPhase runs one phase of a raw scenario: unpaced at rate 0 (its
// saturation), else offering rate messages per second with latency
// stamps; pid is the broker's process for the CPU figures (0: none).
type rawPhase func(rate float64, warmup, measured time.Duration, pid int) (Result, *RawStats, error)

// runRawPhases runs phase at saturation, then at each of p.LatencyRates
// percent of rateOf(the saturation result), and gathers the latency
// points into the saturation result's RawStats.
func runRawPhases(rawURL string, p Params, rateOf func(Result) float64, phase rawPhase) (Result, error) {
	res, raw, err := phase(0, p.Warmup, p.Duration, brokerPid(rawURL))
	if err != nil {
		return Result{}, err
	}
	for _, pct := range p.LatencyRates {
		rate := rateOf(res) * float64(pct) / 100
		if rate < 1 {
			continue
		}
		lr, lraw, err := phase(rate, time.Second, p.LatencyDuration, 0)
		if err != nil {
			return Result{}, fmt.Errorf("at %d%% of saturation: %w", pct, err)
		}
		pt := lraw.Latency[0]
		pt.Percent, pt.Achieved = pct, lr.ConsumeRate
		raw.Latency = append(raw.Latency, pt)
	}
	res.Raw = raw
	return res, nil
}

// brokerPid is the process listening on rawURL's port, 0 if not found.
func brokerPid(rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0
	}
	pid, _ := pidListening(port)
	return pid
}

// rawStatsOf is a phase's RawStats: the CPU over its measured interval
// (cpu may be nil) per consumed message, and at an offered rate the
// latency of the merged histograms (which go back to the pool).
func rawStatsOf(cpu *cpuMeter, res Result, rate float64, hists []*histogram) *RawStats {
	raw := &RawStats{}
	if cpu != nil {
		raw.BrokerCores, raw.ClientCores = cpu.broker, cpu.client
		if res.ConsumeRate > 0 {
			raw.BrokerNsPerMsg = cpu.broker * 1e9 / res.ConsumeRate
		}
	}
	if rate > 0 {
		h := histPool.Get().(*histogram)
		*h = histogram{}
		for _, x := range hists {
			h.merge(x)
			histPool.Put(x)
		}
		raw.Latency = []LatencyPoint{{Offered: rate, P50: h.quantile(0.5), P99: h.quantile(0.99), P999: h.quantile(0.999),
			Max: float64(h.max) / 1000, Samples: h.n}}
		histPool.Put(h)
	}
	return raw
}

// measureRaw runs measureWith over a phase's warmup and measured interval
// with the broker's and this process's CPU metered around the latter;
// tally stores the phase's counts into sum every 10 ms.
func measureRaw(ctx context.Context, p Params, warmup, measured time.Duration, pid int, errc <-chan error,
	tally func(sum *counters)) (Result, *cpuMeter, error) {
	var sum counters
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			tally(&sum)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	var cpu *cpuMeter
	mp := p
	mp.Warmup, mp.Duration = warmup, measured
	res, err := measureWith(ctx, &sum, mp, errc, func() { cpu = startCPU(pid) }, func() { cpu.stop() })
	close(stop)
	wg.Wait()
	return res, cpu, err
}

// rawPublish is a raw publisher's loop, until stop: at rate 0 it sends
// rawBatch messages whenever credit(n, rawBatch) allows (n: sent so far),
// else what is due at rate, at most rawBatch at once, with a latency
// stamp (the time just before the write; 0 at rate 0). send writes k
// messages after the n already sent; sent holds n after each send.
func rawPublish(rate float64, stop *atomic.Bool, g *gate, sent *atomic.Uint64,
	credit func(n, k uint64) bool, send func(n, k, stamp uint64) error) error {
	var n uint64
	start := time.Now()
	for !stop.Load() {
		k := uint64(rawBatch)
		if rate > 0 {
			due := uint64(time.Since(start).Seconds() * rate)
			if due <= n {
				time.Sleep(time.Duration(float64(time.Second) / rate * float64(min(rawBatch/4, 16))))
				continue
			}
			k = min(due-n, rawBatch)
		}
		if !credit(n, k) {
			g.wait(func() bool { return credit(n, k) }, stop)
			continue
		}
		var stamp uint64
		if rate > 0 {
			stamp = uint64(time.Since(rawEpoch))
		}
		if err := send(n, k, stamp); err != nil {
			return err
		}
		n += k
		sent.Store(n)
	}
	return nil
}

// rawReader is the read side of a raw scenario's connection: a buffer and
// how much of it holds what was read and not yet consumed.
type rawReader struct {
	nc   net.Conn
	buf  []byte
	have int
}

// fill drops buf[:from], reads more after what is left (growing the
// buffer when it is full: a frame larger than it).
func (c *rawReader) fill(from int) (int, error) {
	c.drop(from)
	if c.have == len(c.buf) {
		c.buf = append(c.buf, make([]byte, len(c.buf))...)
	}
	n, err := c.nc.Read(c.buf[c.have:])
	c.have += n
	return n, err
}

// drop removes the first n buffered bytes.
func (c *rawReader) drop(n int) {
	copy(c.buf, c.buf[n:c.have])
	c.have -= n
}

// readLoop alternates scan, which consumes whole frames from the start of
// buf[:have] and says how many bytes they took, with reads, until the
// connection ends. An error of scan's or the connection's goes to fail
// (prefixed with who), unless stop was set: then the end is expected.
func (c *rawReader) readLoop(who string, stop *atomic.Bool, fail func(error), scan func() (int, error)) {
	for {
		off, err := scan()
		if err == nil {
			_, err = c.fill(off)
		}
		if err == nil {
			continue
		}
		if !stop.Load() {
			if errors.Is(err, io.EOF) {
				err = errors.New("connection closed by the broker")
			}
			fail(fmt.Errorf("%s: %w", who, err))
		}
		return
	}
}
