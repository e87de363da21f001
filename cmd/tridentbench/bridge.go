package main

// The MQTT bridge benchmark (--bridge N, issue 42): an edge broker bridges
// the topic bench/# at QoS 1 with a cloud broker, as Mosquitto's
// `connection` blocks do: out (the edge forwards what is published to it)
// or in (the edge takes what is published to the cloud). Five pairs, named
// by the way the messages go, in the same run:
//
//	trident → trident            out: the edge's bridge from its
//	trident → mosquitto          configuration (--mqtt-bridges), a
//	mosquitto → trident (in)     persistent remote session
//	mosquitto → mosquitto        the anchor: a Mosquitto edge with the same
//	mosquitto → mosquitto (in)   bridge (cleansession false, persistence on)
//
// Mosquitto is the Debian package's binary (test/testdata/install-mosquitto.sh
// installs it); both Mosquittos run with max_queued_messages 0 (no limit),
// since by default Mosquitto drops QoS 1 messages past 1,000 queued for a
// slow bridge or subscriber, which Trident never does; without the binary
// the pairs that need it are skipped.
//
// Each pair has two phases, each with N messages of --size bytes (the first
// 8 the message's index), published at QoS 1 by one client with at most
// 1,000 unacknowledged, to the edge (out) or the cloud (in), received at
// QoS 1 by one subscriber on the other (in: with a persistent session, to
// which it reconnects after the edge's restart):
//
//	rate   messages per second from the first publish to the last distinct
//	       arrival
//	kill   every message is published and acknowledged (by the edge, out;
//	       by the cloud, in), the edge is killed (SIGKILL) at once and
//	       restarted on the same data; then the subscriber gets what
//	       arrives until it has all N or nothing came for 20 s:
//	       lost = N - distinct, duplicates counted
//
// A message a broker acknowledged is one it has taken responsibility for:
// Trident stores it before the PUBACK (and a bridge acknowledges a message
// it takes in only once stored); Mosquitto keeps it in memory and writes
// its persistence file on autosave or shutdown.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/trident-broker/trident/test/testbin"
)

// bridgePhase is one phase's figures.
type bridgePhase struct {
	Pair       string  `json:"pair"`
	Phase      string  `json:"phase"`
	Messages   int     `json:"messages"`
	Rate       float64 `json:"msgs_per_sec,omitempty"`
	Received   int     `json:"received"`
	Lost       int     `json:"lost"`
	Duplicates int     `json:"duplicates"`
	Seconds    float64 `json:"seconds"`
}

// bridgeBroker is one broker of a pair: its MQTT address and how to kill
// and restart it on the same data.
type bridgeBroker struct {
	addr    string
	kill    func() error
	restart func() error
	stop    func()
}

func runBridge(ctx context.Context, o *options) error {
	n := o.bridge
	done, err := buildTrident(ctx, o)
	if err != nil {
		return err
	}
	defer done()
	mosq := findMosquitto()
	type pair struct {
		name        string
		edge, cloud bridgeStart
		in          bool
		needsMosq   bool
	}
	trident := func(cloud, rule string) (*bridgeBroker, error) { return bridgeTrident(ctx, o, cloud, rule) }
	mosquitto := func(cloud, rule string) (*bridgeBroker, error) { return startBridgeMosquitto(mosq, cloud, rule) }
	pairs := []pair{
		{name: "trident → trident", edge: trident, cloud: trident},
		{name: "trident → mosquitto", edge: trident, cloud: mosquitto, needsMosq: true},
		{name: "mosquitto → trident (in)", edge: trident, cloud: mosquitto, in: true, needsMosq: true},
		{name: "mosquitto → mosquitto", edge: mosquitto, cloud: mosquitto, needsMosq: true},
		{name: "mosquitto → mosquitto (in)", edge: mosquitto, cloud: mosquitto, in: true, needsMosq: true},
	}
	var out []bridgePhase
	for _, p := range pairs {
		if p.needsMosq && mosq == "" {
			fmt.Fprintf(os.Stderr, "tridentbench: %s skipped: no mosquitto binary (test/testdata/install-mosquitto.sh installs it)\n", p.name)
			continue
		}
		phases, err := bridgePair(ctx, o, p.name, n, p.edge, p.cloud, p.in)
		out = append(out, phases...)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"host": hostInfo(), "messages": n, "size": o.params.MsgSize, "phases": out})
	}
	fmt.Printf("MQTT bridge, bench/# at QoS 1, %d messages of %d B per phase, on %d CPUs\n", n, max(o.params.MsgSize, 8), hostInfo()["cpus"])
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pair\tphase\tmsgs/s\treceived\tlost\tduplicates\tseconds\t")
	for _, p := range out {
		rate := ""
		if p.Rate > 0 {
			rate = human(p.Rate)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.1f\t\n", p.Pair, p.Phase, rate, p.Received, p.Lost, p.Duplicates, p.Seconds)
	}
	return tw.Flush()
}

// bridgeStart starts a broker; with a cloud address, bridging to it by the
// Mosquitto topic rule.
type bridgeStart func(cloud, rule string) (*bridgeBroker, error)

// bridgePair runs both phases on a fresh cloud and edge.
func bridgePair(ctx context.Context, o *options, name string, n int, edgeOf, cloudOf bridgeStart, in bool) ([]bridgePhase, error) {
	cloud, err := cloudOf("", "")
	if err != nil {
		return nil, fmt.Errorf("cloud: %w", err)
	}
	defer cloud.stop()
	rule := "bench/# out 1"
	if in {
		rule = "bench/# in 1"
	}
	edge, err := edgeOf(cloud.addr, rule)
	if err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	defer edge.stop()
	var out []bridgePhase
	for _, phase := range []string{"rate", "kill"} {
		fmt.Fprintf(os.Stderr, "%s: %s ... ", name, phase)
		p, err := bridgeRun(ctx, o, edge, cloud, n, in, phase == "kill")
		p.Pair, p.Phase = name, phase
		if err != nil {
			fmt.Fprintln(os.Stderr, "error")
			return out, err
		}
		fmt.Fprintf(os.Stderr, "%s/s, %d lost, %d duplicates\n", human(p.Rate), p.Lost, p.Duplicates)
		out = append(out, p)
	}
	return out, nil
}

// bridgeRun publishes n messages under a topic of its own to the edge (to
// the cloud, in) and counts what the subscriber on the other receives.
func bridgeRun(ctx context.Context, o *options, edge, cloud *bridgeBroker, n int, in, kill bool) (bridgePhase, error) {
	from, to := edge, cloud
	if in {
		from, to = cloud, edge
	}
	p := bridgePhase{Messages: n}
	topic := "bench/" + randomSuffix()
	tally := newIndexTally(n)
	handler := func(_ mqtt.Client, m mqtt.Message) { tally.add(m.Payload()) }
	// In, the subscriber is on the edge, which the kill phase restarts: a
	// persistent session it reconnects to.
	subID := "tb-bridge-sub-" + randomSuffix()
	subscribe := func() (mqtt.Client, error) {
		sub, err := mqttDialSession("mqtt://guest:guest@"+to.addr, subID, !in, nil)
		if err != nil {
			return nil, err
		}
		if tok := sub.Subscribe(topic+"/#", 1, handler); !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
			sub.Disconnect(0)
			return nil, fmt.Errorf("subscribe: %v", tok.Error())
		}
		return sub, nil
	}
	sub, err := subscribe()
	if err != nil {
		return p, err
	}
	defer func() { sub.Disconnect(100) }()
	pub, err := mqttDial("mqtt://guest:guest@"+from.addr, "tb-bridge-pub-"+randomSuffix(), nil)
	if err != nil {
		return p, err
	}
	// The bridge subscribes when it connects: wait until a probe crosses
	// before timing.
	if err := bridgeProbe(ctx, pub, to, topic); err != nil {
		pub.Disconnect(0)
		return p, err
	}
	start := time.Now()
	window := make(chan struct{}, 1000)
	toks := make(chan mqtt.Token, 1000)
	acked := make(chan error, 1)
	go func() {
		for t := range toks {
			if !t.WaitTimeout(60*time.Second) || t.Error() != nil {
				acked <- fmt.Errorf("publish to the edge not acknowledged: %v", t.Error())
				for range toks {
				}
				return
			}
			<-window
		}
		acked <- nil
	}()
	size := max(o.params.MsgSize, 8)
	for i := range n {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			close(toks)
			return p, ctx.Err()
		}
		body := make([]byte, size)
		binary.BigEndian.PutUint64(body, uint64(i))
		toks <- pub.Publish(fmt.Sprintf("%s/%d", topic, i%16), 1, false, body)
	}
	close(toks)
	if err := <-acked; err != nil {
		pub.Disconnect(0)
		return p, err
	}
	pub.Disconnect(0)
	if kill {
		if err := edge.kill(); err != nil {
			return p, err
		}
		if err := edge.restart(); err != nil {
			return p, err
		}
		if in {
			sub.Disconnect(0)
			if sub, err = subscribe(); err != nil {
				return p, fmt.Errorf("the subscriber back on the restarted edge: %w", err)
			}
		}
	}
	// Until all arrived, or nothing new for 20 s.
	for {
		got, _, last := tally.counts()
		if got == n {
			break
		}
		if last.IsZero() {
			last = start
		}
		wait := 20*time.Second - time.Since(last)
		if wait <= 0 {
			break
		}
		select {
		case <-tally.all:
		case <-time.After(min(wait, time.Second)):
		case <-ctx.Done():
			return p, ctx.Err()
		}
	}
	distinct, dups, lastAt := tally.counts()
	p.Received, p.Duplicates, p.Lost = distinct+dups, dups, n-distinct
	if distinct > 0 {
		p.Seconds = lastAt.Sub(start).Seconds()
	}
	if !kill && distinct == n {
		p.Rate = float64(n) / p.Seconds
	}
	return p, nil
}

// bridgeProbe publishes probes to topic/probe through pub until one
// reaches the broker to (the bridge is connected and subscribed).
func bridgeProbe(ctx context.Context, pub mqtt.Client, to *bridgeBroker, topic string) error {
	got := make(chan struct{}, 1)
	probe, err := mqttDial("mqtt://guest:guest@"+to.addr, "tb-bridge-probe-"+randomSuffix(), nil)
	if err != nil {
		return err
	}
	defer probe.Disconnect(0)
	tok := probe.Subscribe(topic+"/probe", 1, func(mqtt.Client, mqtt.Message) {
		select {
		case got <- struct{}{}:
		default:
		}
	})
	if !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
		return fmt.Errorf("probe subscribe: %v", tok.Error())
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		pub.Publish(topic+"/probe", 1, false, []byte("probe")).WaitTimeout(5 * time.Second)
		select {
		case <-got:
			return nil
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.New("the bridge carried no probe in 60 s")
}

// bridgeTrident starts a Trident with an MQTT listener; with a cloud
// address, it bridges to it by rule.
func bridgeTrident(ctx context.Context, o *options, cloud, rule string) (*bridgeBroker, error) {
	port, err := testbin.FreePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{"--mqtt-listen", addr}, o.tridentArgs...)
	if cloud != "" {
		b, _ := json.Marshal([]map[string]any{{
			"name": "bench", "address": cloud, "topics": []string{rule},
			"cleansession": false, "remote_clientid": "tb-bridge-" + randomSuffix(),
			"remote_username": "guest", "remote_password": "guest",
		}})
		args = append(args, "--mqtt-bridges", string(b))
	}
	proc, err := testbin.Launch(ctx, testbin.Options{Binary: o.tridentBin, ExtraArgs: args})
	if err != nil {
		return nil, err
	}
	return &bridgeBroker{addr: addr, kill: proc.Kill, restart: proc.Restart, stop: func() {
		_ = proc.Stop()
		proc.Cleanup()
	}}, nil
}

// findMosquitto is the mosquitto binary, or "".
func findMosquitto() string {
	for _, p := range []string{"/usr/sbin/mosquitto", "/usr/bin/mosquitto"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p
	}
	return ""
}

// startBridgeMosquitto starts a Mosquitto on a free loopback port with
// persistence on; with a cloud address, it bridges to it by rule with a
// persistent remote session.
func startBridgeMosquitto(bin, cloud, rule string) (*bridgeBroker, error) {
	dir, err := os.MkdirTemp("", "tridentbench-mosquitto-")
	if err != nil {
		return nil, err
	}
	// Started as root, mosquitto runs as user "mosquitto": it must be able
	// to write its persistence file here.
	_ = os.Chmod(dir, 0o777)
	port, err := testbin.FreePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\npersistence true\npersistence_location %s/\nlog_dest file %s\n",
		port, dir, filepath.Join(dir, "mosquitto.log"))
	if cloud != "" {
		conf += fmt.Sprintf("connection bench\naddress %s\ntopic %s\ncleansession false\nremote_clientid tb-bridge-%s\nremote_username guest\nremote_password guest\n", cloud, rule, randomSuffix())
	}
	cfg := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	var (
		mu  sync.Mutex
		cmd *exec.Cmd
	)
	start := func() error {
		c := exec.Command(bin, "-c", cfg)
		if err := c.Start(); err != nil {
			return err
		}
		mu.Lock()
		cmd = c
		mu.Unlock()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				return nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		return fmt.Errorf("mosquitto on %s did not listen in 10 s", addr)
	}
	signal := func(s syscall.Signal) error {
		mu.Lock()
		c := cmd
		mu.Unlock()
		if c == nil {
			return nil
		}
		_ = c.Process.Signal(s)
		_, err := c.Process.Wait()
		return err
	}
	if err := start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &bridgeBroker{addr: addr,
		kill:    func() error { return signal(syscall.SIGKILL) },
		restart: start,
		stop: func() {
			_ = signal(syscall.SIGTERM)
			os.RemoveAll(dir)
		}}, nil
}
