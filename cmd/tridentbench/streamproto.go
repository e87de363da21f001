package main

// The stream-protocol benchmark (--stream-protocol N, issue 41): RabbitMQ's
// binary stream protocol (port 5552; the RabbitMQ anchor's on 5553), with
// the real rabbitmq-stream-go-client and with the raw client of
// streamproto_raw.go, Trident and the anchor in the same run.
//
// Targets are rabbitmq-stream://user:pass@host:port/vhost URLs (--target
// name=URL); without one, tridentbench builds and starts a Trident with its
// stream listener on a free loopback port; --anchors adds the RabbitMQ
// anchor (rabbitmq-stream://guest:guest@127.0.0.1:5553/). Every target gets
// the same phases, each on a fresh stream:
//
//	go publish 16 B    one producer (Send, the client's own batching) with
//	go publish 1 KiB   confirms, at most --stream-protocol-window unconfirmed:
//	                   N messages, msgs/s from the first send to the last
//	                   confirm, confirm latency p50/p99 (send to confirm)
//	go super x3        the N 16 B messages to a super stream of
//	publish 16 B       --stream-protocol-super partitions (declared over the
//	                   protocol) through the client's super stream producer,
//	                   routed by the hash of each message's index; a target
//	                   that cannot declare one (RabbitMQ before 3.13) skips it
//	go consume x1      one consumer from first reads the N 16 B messages
//	go consume x10     ten consumers, each on its own connection, each read
//	                   all N: msgs/s each (the slowest and fastest) and total
//	raw publish 16 B   pre-encoded publish frames of rawSPBatch messages,
//	                   pipelined within the window, confirms counted
//	raw partitions xK  the N messages over --stream-protocol-super plain
//	publish 16 B       streams at once, a raw publisher and connection
//	                   each (a super stream's partitions, as its clients
//	                   publish to them; any broker), msgs/s over the wall time
//	raw consume x1     a reader that counts each chunk's records from its
//	raw consume x10    header without decoding the messages
//
// The client's socket buffers are --stream-protocol-sockbuf (1 MiB, as the
// issue measures RabbitMQ: with the client's default of 8 KiB both brokers
// collapse on loopback; compare only at the same setting); the raw client
// sets the same on its sockets. Every phase checks its counts: each
// message confirmed exactly once and none refused, each consumer saw
// offsets 0 … N-1 in order, once each; any difference fails the run.
// Broker figures: CPU over the phase per message (user+system of the
// broker process), peak RSS (VmRSS sampled every 100 ms during the phase)
// and VmHWM at the end. The broker's process is the self-started Trident,
// the anchor's beam.smp, --pid name=PID, or whoever listens on the URL's
// port (found through /proc/net/tcp).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/trident-broker/trident/test/testbin"
)

// streamProtoScheme is the target URL scheme of the stream protocol.
const streamProtoScheme = "rabbitmq-stream"

// rabbitStreamAnchorURL is the anchor RabbitMQ's stream listener.
const rabbitStreamAnchorURL = "rabbitmq-stream://guest:guest@127.0.0.1:5553/"

// pidList collects --pid name=PID.
type pidList map[string]int

func (l pidList) String() string { return "" }

func (l pidList) Set(v string) error {
	name, p, ok := strings.Cut(v, "=")
	pid, err := strconv.Atoi(p)
	if !ok || name == "" || err != nil || pid <= 0 {
		return errors.New("want name=PID")
	}
	l[name] = pid
	return nil
}

// spPhase is one phase's figures.
type spPhase struct {
	Target     string  `json:"target"`
	Phase      string  `json:"phase"`
	Messages   int     `json:"messages"`
	Rate       float64 `json:"msgs_per_sec"`
	EachMin    float64 `json:"each_min_per_sec,omitempty"` // per consumer, with several
	EachMax    float64 `json:"each_max_per_sec,omitempty"`
	P50us      float64 `json:"confirm_p50_us,omitempty"`
	P99us      float64 `json:"confirm_p99_us,omitempty"`
	BrokerNs   float64 `json:"broker_cpu_ns_per_msg,omitempty"`
	BrokerCPU  float64 `json:"broker_cores,omitempty"`
	ClientCPU  float64 `json:"client_cores,omitempty"`
	PeakRSS    int64   `json:"broker_peak_rss_bytes,omitempty"`
	ConfirmFrm uint64  `json:"confirm_frames,omitempty"` // raw publish: confirm frames received
	Duplicates int     `json:"duplicates,omitempty"`     // super stream consume: messages read twice
}

// spTarget is a broker for the stream-protocol benchmark: its clients
// connect to url; its CPU is that of pid's process and those of others
// (the other nodes of a cluster target).
type spTarget struct {
	name, url string
	pid       func() int
	others    []func() int
}

func runStreamProtoBench(ctx context.Context, o *options) error {
	n := o.streamProto
	clients := map[string]bool{}
	for _, c := range strings.Split(o.streamProtoClients, ",") {
		switch c = strings.TrimSpace(c); c {
		case "go", "raw":
			clients[c] = true
		default:
			return fmt.Errorf("--stream-protocol-clients: %q is neither go nor raw", c)
		}
	}
	var targets []spTarget
	var hwms []func() (string, int64)
	for _, t := range o.targets {
		u, ok := t.URLs[streamProtoScheme]
		if !ok {
			continue
		}
		pid := o.pids[t.Name]
		if pid == 0 {
			pid = brokerPid(u)
		}
		targets = append(targets, spTarget{name: t.Name, url: u, pid: func() int { return pid }})
	}
	if len(o.targets) == 0 || o.streamProtoCluster {
		done, err := buildTrident(ctx, o)
		if err != nil {
			return err
		}
		defer done()
	}
	if len(o.targets) == 0 {
		port, err := testbin.FreePort()
		if err != nil {
			return err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		args := o.tridentArgs
		o.tridentArgs = append(slices.Clip(args), "--stream-listen", addr)
		proc, err := launchTrident(ctx, o)
		o.tridentArgs = args
		if err != nil {
			return err
		}
		defer func() {
			if err := proc.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "tridentbench: %v\n", err)
			}
			proc.Cleanup()
		}()
		targets = append(targets, spTarget{name: "trident", url: "rabbitmq-stream://guest:guest@" + addr + "/", pid: proc.Pid})
	} else if len(targets) == 0 && !o.anchors && !o.streamProtoCluster {
		return errors.New("no target has a " + streamProtoScheme + ":// URL")
	}
	if o.streamProtoCluster {
		ct, stop, err := spClusterTarget(ctx, o)
		if err != nil {
			return err
		}
		defer stop()
		targets = append(targets, ct)
	}
	if o.anchors && !o.targets.has(baselineName) {
		if err := runAnchors(ctx); err != nil {
			return err
		}
		targets = append(targets, spTarget{name: baselineName, url: rabbitStreamAnchorURL, pid: rabbitPid})
	}

	var phases []spPhase
	for _, t := range targets {
		fmt.Fprintf(os.Stderr, "tridentbench: %s at %s (broker pid %d)\n", t.name, t.url, t.pid())
		var add []spPhase
		var err error
		if clients["go"] {
			add, err = spGoTarget(ctx, o, t, n)
			phases = append(phases, add...)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
		if clients["raw"] {
			add, err = spRawTarget(ctx, o, t, n)
			phases = append(phases, add...)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
		name, pid := t.name, t.pid
		hwms = append(hwms, func() (string, int64) { return name, hwm(pid()) })
	}
	hw := map[string]int64{}
	for _, f := range hwms {
		name, v := f()
		hw[name] = v
	}
	if o.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"host": hostInfo(), "messages": n, "sockbuf": o.streamProtoSockBuf,
			"window": o.streamProtoWindow, "phases": phases, "broker_vmhwm_bytes": hw})
	}
	writeStreamProto(os.Stdout, o, phases, hw)
	return nil
}

// spClusterTarget starts three local Trident nodes, each with a stream
// listener, as the target trident-3node: the clients reach node 0, which
// answers metadata for every stream (and forwards to a stream's leader on
// another node); the broker figures are the three processes' sums.
func spClusterTarget(ctx context.Context, o *options) (spTarget, func(), error) {
	var ports []int
	for range clusterSize {
		p, err := testbin.FreePort()
		if err != nil {
			return spTarget{}, nil, err
		}
		ports = append(ports, p)
	}
	c, err := startClusterWith(ctx, o.tridentBin, "spread", o.clusterProf, func(i int) []string {
		return append([]string{"--stream-listen", fmt.Sprintf("127.0.0.1:%d", ports[i])}, o.tridentArgs...)
	})
	if err != nil {
		return spTarget{}, nil, err
	}
	t := spTarget{name: clusterTargetName, url: fmt.Sprintf("rabbitmq-stream://guest:guest@127.0.0.1:%d/", ports[0]), pid: c.nodes[0].p.Pid}
	for _, nd := range c.nodes[1:] {
		t.others = append(t.others, nd.p.Pid)
	}
	return t, c.stop, nil
}

func writeStreamProto(w io.Writer, o *options, phases []spPhase, hw map[string]int64) {
	fmt.Fprintf(w, "stream protocol, N=%d, socket buffers %s, confirm window %d, on %d CPUs\n",
		o.streamProto, mib(int64(o.streamProtoSockBuf)), o.streamProtoWindow, hostInfo()["cpus"])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tphase\tmsgs/s\teach min–max\tconfirm p50 µs\tp99 µs\tbroker ns/msg\tbroker cores\tbroker peak RSS\t")
	for _, p := range phases {
		each, p50, p99 := "", "", ""
		if p.EachMax > 0 {
			each = human(p.EachMin) + "–" + human(p.EachMax)
		}
		if p.P50us > 0 {
			p50, p99 = fmt.Sprintf("%.0f", p.P50us), fmt.Sprintf("%.0f", p.P99us)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.2f\t%s\t\n", p.Target, p.Phase, human(p.Rate), each, p50, p99,
			p.BrokerNs, p.BrokerCPU, mib(p.PeakRSS))
	}
	_ = tw.Flush()
	for _, p := range phases {
		if p.Duplicates > 0 {
			fmt.Fprintf(w, "%s %s: %d messages read twice (a partition taken over while the group settled)\n", p.Target, p.Phase, p.Duplicates)
		}
	}
	for name, v := range hw {
		fmt.Fprintf(w, "%s: broker VmHWM %s at the end\n", name, mib(v))
	}
}

// spURL is a stream target's parts.
type spURL struct {
	host        string
	port        int
	user, pass  string
	vhost, addr string
}

func parseSPURL(raw string) (spURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return spURL{}, err
	}
	if u.Scheme != streamProtoScheme {
		return spURL{}, fmt.Errorf("%s: not a %s:// URL", raw, streamProtoScheme)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 5552
	}
	s := spURL{host: u.Hostname(), port: port, user: "guest", pass: "guest", vhost: "/"}
	if u.User != nil {
		s.user = u.User.Username()
		s.pass, _ = u.User.Password()
	}
	if v := strings.TrimPrefix(u.Path, "/"); v != "" {
		s.vhost = v
	}
	s.addr = fmt.Sprintf("%s:%d", s.host, s.port)
	return s, nil
}

// spMeter is a phase's broker CPU and RSS: of every process of the
// target, summed (the sum of each process's peak RSS for a cluster).
type spMeter struct {
	cpu []*cpuMeter
	rss []*rssSampler
}

func startSPMeter(t spTarget) *spMeter {
	m := &spMeter{}
	for _, pid := range append([]func() int{t.pid}, t.others...) {
		m.cpu = append(m.cpu, startCPU(pid()))
		m.rss = append(m.rss, startRSS(pid))
	}
	return m
}

// stop fills p's broker figures for consumed messages at p.Rate.
func (m *spMeter) stop(p *spPhase) {
	ok := true
	for i, c := range m.cpu {
		c.stop()
		p.PeakRSS += m.rss[i].stop()
		p.BrokerCPU += c.broker
		ok = ok && c.brokerOK
	}
	p.ClientCPU = m.cpu[0].client
	if p.Rate > 0 && ok {
		p.BrokerNs = p.BrokerCPU * 1e9 / p.Rate
	}
}

// spRunPhase runs one phase against t with the broker's CPU and RSS
// measured around it, and says how it went on standard error.
func spRunPhase(t spTarget, phase string, run func() (spPhase, error)) (spPhase, error) {
	fmt.Fprintf(os.Stderr, "%s: %s ... ", t.name, phase)
	m := startSPMeter(t)
	p, err := run()
	p.Target, p.Phase = t.name, phase
	m.stop(&p)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "error")
	case p.P50us > 0:
		fmt.Fprintf(os.Stderr, "%s/s, confirm p50 %.0f µs p99 %.0f µs\n", human(p.Rate), p.P50us, p.P99us)
	default:
		fmt.Fprintf(os.Stderr, "%s/s\n", human(p.Rate))
	}
	return p, err
}

func sizeName(size int) string {
	if size%1024 == 0 {
		return fmt.Sprintf("%d KiB", size/1024)
	}
	return fmt.Sprintf("%d B", size)
}

// quantilesUs are the median and 99th percentile of ns in µs (sorted in place).
func quantilesUs(ns []int64) (p50, p99 float64) {
	if len(ns) == 0 {
		return 0, 0
	}
	slices.Sort(ns)
	return float64(ns[len(ns)/2]) / 1e3, float64(ns[min(len(ns)*99/100, len(ns)-1)]) / 1e3
}

// spReadAll runs k readers, each reading all n messages; the phase's
// rate is k·n over the time until the last finished.
func spReadAll(ctx context.Context, k, n int, read func(ctx context.Context, n int) (float64, error)) (spPhase, error) {
	p := spPhase{Messages: k * n}
	rates := make([]float64, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range k {
		wg.Go(func() { rates[i], errs[i] = read(ctx, n) })
	}
	wg.Wait()
	p.Rate = float64(k*n) / time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return p, err
	}
	if k > 1 {
		p.EachMin, p.EachMax = rates[0], rates[0]
		for _, r := range rates {
			p.EachMin, p.EachMax = min(p.EachMin, r), max(p.EachMax, r)
		}
	}
	return p, nil
}
