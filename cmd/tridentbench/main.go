// Command tridentbench measures end-to-end broker throughput with real clients
// against one or more brokers, one after the other in the same run, and prints
// the figures side by side.
//
//	go run ./cmd/tridentbench                         # builds and starts a Trident, benches it
//	go run ./cmd/tridentbench --anchors               # ... and RabbitMQ from ../shared/anchors
//	go run ./cmd/tridentbench --anchors --cluster3 \
//	    --scenarios amqp-quorum-1-1,amqp-quorum-10-10  # ... and a 3-node Trident cluster
//	go run ./cmd/tridentbench \
//	    --target trident=amqp://guest:guest@127.0.0.1:5672/ \
//	    --target rabbitmq=amqp://guest:guest@127.0.0.1:5673/ --duration 10s --rounds 3
//
// Scenarios (AMQP 0-9-1 with github.com/rabbitmq/amqp091-go, 1 publisher and
// 1 consumer on separate connections, 16-byte bodies by default):
//
//	amqp-transient-autoack   transient messages, non-durable queue, no-ack consumer,
//	                         publisher unthrottled but at most --max-in-flight ahead
//	amqp-persistent-confirm  persistent messages, durable queue, publisher confirms
//	                         (window --confirm-window), manual acks (prefetch
//	                         --prefetch, multiple every --ack-every)
//	amqp-quorum-1-1          as amqp-persistent-confirm, to a quorum queue
//	                         (x-queue-type: quorum)
//	amqp-quorum-10-10        the same with 10 publishers and 10 consumers on one
//	                         quorum queue, each on its own connection; the
//	                         confirm window is per publisher
//	amqp-stream-1-1          as amqp-persistent-confirm, to a stream
//	                         (x-queue-type: stream), the consumer reading
//	                         from next (see also --stream, stream.go)
//
// Raw AMQP scenarios (rawamqp.go): a load generator that is not the
// bottleneck, pre-encoded basic.publish frames written 256 at a time,
// consumers that scan for basic.deliver frames without decoding them,
// multiple acks and confirms pipelined; counts verified after each phase.
// Each reports broker and client CPU (cores), the broker's CPU ns per
// message, confirm frames per confirmed message, and publish-to-deliver
// latency percentiles at --latency-rates percent of its saturation rate:
//
//	raw-amqp-transient-autoack   transient, no-ack consumer
//	raw-amqp-transient-ack       transient, manual acks (prefetch, ack-every)
//	raw-amqp-persistent-confirm  persistent to a durable queue, confirms
//	                             (window --confirm-window), manual acks
//	raw-amqp-10q-autoack         10 pairs, each its own queue and connections
//
// The raw MQTT (raw-mqtt-*, rawmqtt.go) and raw STOMP (raw-stomp-*,
// rawstomp.go) scenarios use the same driver (rawstats.go) and report the
// same figures.
//
// --stream-protocol N runs instead the benchmark of RabbitMQ's stream
// protocol (streamproto.go) against rabbitmq-stream://user:pass@host:port/vhost
// targets, with rabbitmq-stream-go-client and a raw client.
//
// The RabbitMQ anchor is a single node, so its quorum queues have one member:
// Raft with no replication, fsynced before confirms; the single-node Trident's
// likewise live in its local store. --cluster3 adds the target trident-3node,
// three trident processes on loopback (cluster.go), where a quorum queue
// has three members and a confirm means a majority wrote the message; only
// the quorum scenarios run against it, with the clients placed by
// --cluster-clients (default: publishers and consumers on the two
// followers, so every message is forwarded to the leader and back).
//
// "published/s" is messages sent, or confirmed by the broker in the confirm
// scenario; "consumed/s" is the consumer's receive rate, the headline figure.
// The ratio column compares consumed/s with the target named rabbitmq if there
// is one, else with the first target.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/trident-broker/trident/test/testbin"
)

// scenarios is every scenario, in run order: an explicit list of each
// protocol's (no init() registration).
var scenarios = slices.Concat(amqpScenarios, mqttScenarios, mqttManyScenarios, rawMQTTScenarios,
	rawSTOMPScenarios, stompScenarios)

// amqpScenarios are the AMQP ones (amqp.go, rawamqp.go).
var amqpScenarios = []Scenario{
	amqpScenario{name: "amqp-transient-autoack"},
	amqpScenario{name: "amqp-persistent-confirm", confirms: true},
	amqpScenario{name: "amqp-quorum-1-1", confirms: true, quorum: true},
	amqpScenario{name: "amqp-quorum-10-10", confirms: true, quorum: true, publishers: 10, consumers: 10},
	amqpScenario{name: "amqp-stream-1-1", confirms: true, stream: true},
	rawAMQPScenario{name: "raw-amqp-transient-autoack"},
	rawAMQPScenario{name: "raw-amqp-transient-ack", manualAck: true},
	rawAMQPScenario{name: "raw-amqp-persistent-confirm", persistent: true},
	rawAMQPScenario{name: "raw-amqp-10q-autoack", pairs: 10},
	rawAMQPScenario{name: "raw-amqp-stream-confirm", persistent: true, stream: true},
}

// rabbitAnchorURL is where ../shared/anchors/start-anchors.sh puts RabbitMQ.
const rabbitAnchorURL = "amqp://guest:guest@127.0.0.1:5673/"

// anchorURLs are the anchor RabbitMQ's URLs for the protocols other than
// AMQP, by scheme (each defined in its protocol's scenario file).
var anchorURLs = map[string]string{"mqtt": mqttAnchorURL, "stomp": stompAnchorURL}

// listener is a protocol listener the self-started trident opens on a free
// loopback port: the flag that sets its address and the target URL, with %s
// for host:port. Each protocol's scenario file defines its own.
type listener struct {
	scheme, flag, urlFormat string
}

var listeners = append(slices.Clone(mqttListeners), stompListener)

// baselineName is the target the ratio column compares with, when present.
const baselineName = "rabbitmq"

// Target is a broker under test: a name and one URL per protocol scheme.
type Target struct {
	Name string
	URLs map[string]string // scheme ("amqp", "mqtt", "stomp") → URL
	// cluster is set for the --cluster3 target; URLs["amqp"] is then its
	// first node's, for the report.
	cluster *localCluster
}

// targetList collects repeated --target name=url flags; a name given twice
// with URLs of different schemes is one target speaking several protocols.
type targetList []*Target

func (l *targetList) String() string { return "" }

func (l *targetList) Set(v string) error {
	name, raw, ok := strings.Cut(v, "=")
	if !ok || name == "" || raw == "" {
		return errors.New("want name=url")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	scheme := strings.TrimSuffix(u.Scheme, "s") // amqps → amqp, mqtts → mqtt
	if scheme == "" {
		return fmt.Errorf("%q has no scheme", raw)
	}
	return l.add(name, scheme, raw)
}

func (l *targetList) add(name, scheme, raw string) error {
	for _, t := range *l {
		if t.Name == name {
			if _, dup := t.URLs[scheme]; dup {
				return fmt.Errorf("target %s has two %s URLs", name, scheme)
			}
			t.URLs[scheme] = raw
			return nil
		}
	}
	*l = append(*l, &Target{Name: name, URLs: map[string]string{scheme: raw}})
	return nil
}

func (l targetList) has(name string) bool {
	for _, t := range l {
		if t.Name == name {
			return true
		}
	}
	return false
}

type options struct {
	targets     targetList
	params      Params
	rounds      int
	only        string
	jsonOut     bool
	anchors     bool
	tridentBin  string
	tridentArgs stringList
	cluster3    bool
	placement   string
	clusterProf string

	backlog          int           // --backlog N: the backlog benchmark instead of the scenarios
	backlogAnchor    int           // messages for the RabbitMQ anchor in it
	backlogSettle    time.Duration // wait after the drain before measuring disk again
	backlogQuorum    bool          // --backlog on a quorum queue of a local 3-node cluster
	manyQueues       int           // --many-queues Q: the many-queues benchmark instead
	manyQueuesEach   int           // messages per queue in it
	manyQuorum       int           // --many-quorum N: the many-quorum-queues benchmark instead
	manyQuorumIdle   time.Duration // idle CPU measured over this
	delayed          int           // --delayed N: the delayed-message benchmark instead
	delayedSpan      time.Duration // due times spread over this
	delayedLead      time.Duration // the first due this long after publishing starts
	shovel           int           // --shovel N: the shovel benchmark instead
	bridge           int           // --bridge N: the MQTT bridge benchmark instead
	shovelRabbitMgmt string        // a RabbitMQ management API with rabbitmq_shovel, for the comparison
	shovelRabbitAMQP string        // its AMQP URL
	stream           int           // --stream N: the stream benchmark instead (stream.go)
	streamAnchor     int           // messages for the RabbitMQ anchor in it
	streamRaw        bool          // --stream-raw: with the raw clients
	streamNoReads    bool          // --stream-no-reads: fill and replay only

	streamProto        int     // --stream-protocol N: the stream-protocol benchmark instead (streamproto.go)
	streamProtoClients string  // which clients: go, raw
	streamProtoSockBuf int     // the clients' socket buffers
	streamProtoWindow  int     // unconfirmed messages per publisher
	streamProtoSuper   int     // partitions of the super stream phase (0: none)
	streamProtoCluster bool    // also against three local nodes
	pids               pidList // --pid name=PID: a --target's broker process
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	startPprof()
	o := options{pids: pidList{}}
	fs := flag.NewFlagSet("tridentbench", flag.ExitOnError)
	fs.Var(&o.targets, "target", "broker to bench, `name=url` (repeatable; default: build and start a Trident)")
	fs.DurationVar(&o.params.Duration, "duration", 10*time.Second, "measured time per scenario, target and round")
	fs.DurationVar(&o.params.Warmup, "warmup", 2*time.Second, "unmeasured warm-up before each measurement")
	fs.IntVar(&o.params.MsgSize, "size", 16, "message body size in bytes")
	fs.Uint64Var(&o.params.MaxInFlight, "max-in-flight", 100_000, "publisher pauses when published-consumed exceeds this")
	fs.IntVar(&o.params.ConfirmWindow, "confirm-window", 1000, "max unconfirmed publishes per publisher (confirm scenarios)")
	fs.IntVar(&o.params.Prefetch, "prefetch", 1000, "consumer prefetch count (manual-ack scenario)")
	fs.IntVar(&o.params.AckEvery, "ack-every", 100, "ack with multiple=true every N deliveries (manual-ack scenario)")
	latencyRates := fs.String("latency-rates", "10,50,90", "raw scenarios: measure latency at these `percentages` of saturation (empty: none)")
	fs.DurationVar(&o.params.LatencyDuration, "latency-duration", 5*time.Second, "raw scenarios: measured time per latency rate")
	fs.IntVar(&o.rounds, "rounds", 1, "repeat each scenario, targets interleaved within each round")
	fs.StringVar(&o.only, "scenarios", "", "comma-separated scenario names to run (default all: "+scenarioNames()+")")
	fs.BoolVar(&o.jsonOut, "json", false, "print JSON instead of a table")
	fs.BoolVar(&o.anchors, "anchors", false, "run ../shared/anchors/start-anchors.sh and add target rabbitmq="+rabbitAnchorURL)
	fs.StringVar(&o.tridentBin, "trident-bin", "", "prebuilt trident binary for the self-started target (default: go build ./cmd/trident)")
	fs.Var(&o.tridentArgs, "trident-arg", "extra argument for the self-started trident (repeatable)")
	fs.BoolVar(&o.cluster3, "cluster3", false, "also start a 3-node Trident cluster on loopback, target "+clusterTargetName+" (quorum scenarios only)")
	fs.StringVar(&o.placement, "cluster-clients", "followers", "where "+clusterTargetName+"'s clients connect: "+strings.Join(placements, ", "))
	fs.StringVar(&o.clusterProf, "cluster-pprof", "", "serve pprof on the cluster nodes, `host:port` for n0, port+1 for n1, ...")
	fs.IntVar(&o.backlog, "backlog", 0, "run the backlog benchmark with `N` messages instead of the scenarios (see backlog.go)")
	fs.IntVar(&o.backlogAnchor, "backlog-anchor", 1_000_000, "at most this many messages for the RabbitMQ anchor in the backlog benchmark")
	fs.BoolVar(&o.backlogQuorum, "backlog-quorum", false, "run the backlog benchmark on a quorum queue of a local 3-node Trident cluster (kill -9 of every node; see backlog_quorum.go)")
	fs.DurationVar(&o.backlogSettle, "backlog-settle", 3*time.Minute, "after the drain, wait this long and measure the data directory again")
	fs.IntVar(&o.manyQueues, "many-queues", 0, "run the many-queues benchmark with `Q` durable queues instead of the scenarios (see manyqueues.go)")
	fs.IntVar(&o.manyQueuesEach, "many-queues-each", 100, "messages per queue in the many-queues benchmark")
	fs.IntVar(&o.manyQuorum, "many-quorum", 0, "run the many-quorum-queues benchmark with `N` quorum queues on a local 3-node cluster instead of the scenarios (see manyquorum.go)")
	fs.DurationVar(&o.manyQuorumIdle, "many-quorum-idle", 20*time.Second, "idle CPU of the many-quorum-queues benchmark measured over this")
	fs.IntVar(&o.delayed, "delayed", 0, "run the delayed-message benchmark with `N` messages instead of the scenarios (see delayed.go)")
	fs.DurationVar(&o.delayedSpan, "delayed-span", 60*time.Second, "due times of the delayed-message benchmark spread over this")
	fs.DurationVar(&o.delayedLead, "delayed-lead", 30*time.Second, "the first message of the delayed-message benchmark is due this long after publishing starts")
	fs.IntVar(&o.shovel, "shovel", 0, "run the shovel benchmark with `N` messages instead of the scenarios (see shovel.go)")
	fs.IntVar(&o.bridge, "bridge", 0, "run the MQTT bridge benchmark with `N` messages per phase instead of the scenarios: rate, and loss across a kill of the edge, Trident and Mosquitto (see bridge.go)")
	fs.StringVar(&o.shovelRabbitMgmt, "shovel-rabbit-mgmt", "", "management API `URL` of a RabbitMQ with rabbitmq_shovel enabled, to compare its shovel")
	fs.StringVar(&o.shovelRabbitAMQP, "shovel-rabbit-amqp", rabbitAnchorURL, "AMQP URL of that RabbitMQ")
	fs.IntVar(&o.stream, "stream", 0, "run the stream benchmark with `N` messages instead of the scenarios (see stream.go)")
	fs.IntVar(&o.streamAnchor, "stream-anchor", 1_000_000, "at most this many messages for the RabbitMQ anchor in the stream benchmark")
	fs.BoolVar(&o.streamNoReads, "stream-no-reads", false, "leave out the stream benchmark's reads from first (x1, x10): fill and replay of a large stream")
	fs.BoolVar(&o.streamRaw, "stream-raw", false, "run the stream benchmark with the raw AMQP clients (rawstream.go) instead of amqp091-go")
	fs.IntVar(&o.streamProto, "stream-protocol", 0, "run the stream-protocol benchmark with `N` messages per phase instead of the scenarios: targets "+streamProtoScheme+"://user:pass@host:port/vhost (see streamproto.go)")
	fs.StringVar(&o.streamProtoClients, "stream-protocol-clients", "go,raw", "the stream-protocol benchmark's clients: go (rabbitmq-stream-go-client), raw (streamproto_raw.go)")
	fs.IntVar(&o.streamProtoSockBuf, "stream-protocol-sockbuf", 1<<20, "the stream-protocol clients' socket read and write buffers in `bytes` (0: the client's default)")
	fs.IntVar(&o.streamProtoWindow, "stream-protocol-window", 10_000, "the stream-protocol benchmark's unconfirmed messages per publisher")
	fs.BoolVar(&o.streamProtoCluster, "stream-protocol-cluster3", false, "the stream-protocol benchmark also against three local Trident nodes (target trident-3node; broker CPU and RSS summed over the three)")
	fs.IntVar(&o.streamProtoSuper, "stream-protocol-super", 3, "the stream-protocol benchmark's super stream phases: `N` partitions, the go client's super stream producer and raw publishers to N streams at once (0: no such phases)")
	fs.Var(o.pids, "pid", "the broker process of a --target, `name=PID`, for its CPU and memory (default: whoever listens on the URL's port)")
	nullAddr := fs.String("null-amqp", "", "serve a null AMQP relay (no broker: the generator's and machine's ceiling, see nullamqp.go) on `host:port` and do nothing else")
	_ = fs.Parse(os.Args[1:])
	if *nullAddr != "" {
		fmt.Fprintln(os.Stderr, serveNullAMQP(*nullAddr))
		os.Exit(1)
	}
	for _, f := range strings.Split(*latencyRates, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pct, err := strconv.Atoi(f)
		if err != nil || pct <= 0 || pct > 100 {
			fmt.Fprintf(os.Stderr, "tridentbench: --latency-rates: %q is not a percentage\n", f)
			os.Exit(2)
		}
		o.params.LatencyRates = append(o.params.LatencyRates, pct)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "tridentbench: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if o.backlog > 0 || o.manyQueues > 0 {
		if o.params.MsgSize == 16 && !flagSet(fs, "size") {
			o.params.MsgSize = 1024
		}
	}
	if o.streamProto > 0 {
		err = runStreamProtoBench(ctx, &o)
	} else if o.stream > 0 {
		err = runStreamBench(ctx, &o)
	} else if o.shovel > 0 {
		err = runShovel(ctx, &o)
	} else if o.bridge > 0 {
		err = runBridge(ctx, &o)
	} else if o.delayed > 0 {
		err = runDelayed(ctx, &o)
	} else if o.backlog > 0 {
		err = runBacklog(ctx, &o)
	} else if o.manyQueues > 0 {
		err = runManyQueues(ctx, &o)
	} else if o.manyQuorum > 0 {
		err = runManyQuorum(ctx, &o)
	} else {
		err = run(ctx, &o)
	}
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "tridentbench: %v\n", err)
		os.Exit(1)
	}
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.Name()
	}
	return strings.Join(names, ",")
}

func selectScenarios(only string) ([]Scenario, error) {
	if only == "" {
		var all []Scenario
		for _, s := range scenarios {
			if h, ok := s.(interface{ Hidden() bool }); !ok || !h.Hidden() {
				all = append(all, s)
			}
		}
		return all, nil
	}
	var out []Scenario
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, s := range scenarios {
			if s.Name() == strings.TrimSpace(name) {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", name, scenarioNames())
		}
	}
	return out, nil
}

func run(ctx context.Context, o *options) error {
	p := o.params
	if p.Duration <= 0 || p.Warmup < 0 || p.MsgSize < 0 || p.MaxInFlight == 0 ||
		p.ConfirmWindow <= 0 || p.Prefetch <= 0 || p.AckEvery <= 0 || o.rounds <= 0 {
		return errors.New("--duration, --max-in-flight, --confirm-window, --prefetch, --ack-every and --rounds must be positive")
	}
	if p.AckEvery > p.Prefetch {
		return fmt.Errorf("--ack-every %d > --prefetch %d would stall the consumer", p.AckEvery, p.Prefetch)
	}
	selected, err := selectScenarios(o.only)
	if err != nil {
		return err
	}
	if !slices.Contains(placements, o.placement) {
		return fmt.Errorf("--cluster-clients %q: want one of %s", o.placement, strings.Join(placements, ", "))
	}

	startTrident := len(o.targets) == 0
	if startTrident || o.cluster3 {
		// One build for the single node and the cluster's three.
		done, err := buildTrident(ctx, o)
		if err != nil {
			return err
		}
		defer done()
	}
	if o.anchors {
		if err := runAnchors(ctx); err != nil {
			return err
		}
		if !o.targets.has(baselineName) {
			_ = o.targets.add(baselineName, "amqp", rabbitAnchorURL)
			for scheme, u := range anchorURLs {
				_ = o.targets.add(baselineName, scheme, u)
			}
		}
	}
	if startTrident {
		urls := map[string]string{}
		for _, l := range listeners {
			port, err := testbin.FreePort()
			if err != nil {
				return err
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			o.tridentArgs = append(o.tridentArgs, l.flag, addr)
			urls[l.scheme] = fmt.Sprintf(l.urlFormat, addr)
		}
		proc, err := launchTrident(ctx, o)
		if err != nil {
			if len(o.targets) == 0 {
				return err
			}
			fmt.Fprintf(os.Stderr, "tridentbench: skipping target trident: %v\n", err)
		} else {
			defer func() {
				if err := proc.Stop(); err != nil {
					fmt.Fprintf(os.Stderr, "tridentbench: %v\n", err)
				}
				proc.Cleanup()
			}()
			urls["amqp"] = proc.AMQPURL
			o.targets = append(targetList{{Name: "trident", URLs: urls}}, o.targets...)
		}
	}

	if o.cluster3 {
		fmt.Fprintf(os.Stderr, "tridentbench: starting a %d-node cluster\n", clusterSize)
		c, err := startCluster(ctx, o.tridentBin, o.placement, o.clusterProf)
		if err != nil {
			return err
		}
		defer c.stop()
		o.targets = append(o.targets, &Target{Name: clusterTargetName,
			URLs: map[string]string{"amqp": c.nodes[0].p.AMQPURL}, cluster: c})
	}

	rep := newReport(o, p)
	rep.Notes = reportNotes(selected, o)
	for _, s := range selected {
		for round := 1; round <= o.rounds; round++ {
			for _, t := range o.targets {
				u, ok := t.URLs[s.Scheme()]
				if !ok {
					continue
				}
				cs, onCluster := s.(clusterScenario)
				if t.cluster != nil && (!onCluster || !cs.OnCluster()) {
					continue
				}
				fmt.Fprintf(os.Stderr, "%-24s %-13s round %d/%d ... ", s.Name(), t.Name, round, o.rounds)
				var res Result
				if t.cluster != nil {
					res, err = cs.RunCluster(ctx, t.cluster, p)
				} else {
					res, err = s.Run(ctx, u, p)
				}
				if ctx.Err() != nil {
					fmt.Fprintln(os.Stderr, "interrupted")
					return ctx.Err()
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "error: %v\n", err)
				} else {
					fmt.Fprintf(os.Stderr, "pub %s/s  cons %s/s", human(res.PublishRate), human(res.ConsumeRate))
					if res.Placement != "" {
						fmt.Fprintf(os.Stderr, "  (%s)", res.Placement)
					}
					fmt.Fprintln(os.Stderr)
				}
				rep.add(s.Name(), t, u, res, err)
			}
		}
	}
	rep.finish()
	if o.jsonOut {
		return rep.writeJSON(os.Stdout)
	}
	rep.writeTable(os.Stdout)
	return nil
}

// buildTrident builds ./cmd/trident into a temporary directory for the
// self-started targets, unless --trident-bin or $TRIDENT_BIN names one;
// done removes it.
func buildTrident(ctx context.Context, o *options) (done func(), err error) {
	if o.tridentBin != "" || os.Getenv("TRIDENT_BIN") != "" {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "tridentbench-bin-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "tridentbench: building ./cmd/trident")
	if o.tridentBin, err = testbin.Build(ctx, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return func() { os.RemoveAll(dir) }, nil
}

// runAnchors runs ../shared/anchors/start-anchors.sh relative to the module root.
func runAnchors(ctx context.Context) error {
	root, err := testbin.FindModuleRoot()
	if err != nil {
		return err
	}
	script := filepath.Join(root, "..", "shared", "anchors", "start-anchors.sh")
	fmt.Fprintf(os.Stderr, "tridentbench: running %s\n", script)
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", script, err)
	}
	return nil
}

func launchTrident(ctx context.Context, o *options) (*testbin.Proc, error) {
	fmt.Fprintln(os.Stderr, "tridentbench: no --target given; starting ./cmd/trident")
	proc, err := testbin.Launch(ctx, testbin.Options{Binary: o.tridentBin, ExtraArgs: o.tridentArgs})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "tridentbench: trident listening on %s (data %s, log %s)\n", proc.AMQPAddr, proc.DataDir, proc.LogPath)
	return proc, nil
}

// placementText describes each --cluster-clients value for the report.
var placementText = map[string]string{
	"followers": "publishers and consumers on the two followers of the queue's leader, a publisher's messages leaving from another follower than the one they are consumed on",
	"spread":    "publisher i on node i%3 and consumer i on node (i+1)%3, leader included",
	"leader":    "every client on the queue's leader",
}

// reportNotes explains the quorum scenarios' targets under the table.
func reportNotes(selected []Scenario, o *options) []string {
	quorum := false
	for _, s := range selected {
		if a, ok := s.(amqpScenario); ok && a.quorum {
			quorum = true
		}
	}
	if !quorum {
		return nil
	}
	notes := []string{"amqp-quorum-*: quorum queue (x-queue-type: quorum), persistent messages, publisher confirms " +
		"(window --confirm-window per publisher), manual acks; the rabbitmq anchor is a single node, so its quorum " +
		"queue has one member (no replication); the single-node trident keeps its quorum queue in its local store"}
	if o.cluster3 {
		notes = append(notes, fmt.Sprintf("%s: %d trident processes on this machine, quorum queue with %d members "+
			"(confirm after a majority commit); clients: %s (--cluster-clients=%s)",
			clusterTargetName, clusterSize, clusterSize, placementText[o.placement], o.placement))
	}
	return notes
}

// hostInfo describes the machine for the report.
func hostInfo() map[string]any {
	h, _ := os.Hostname()
	return map[string]any{
		"host":       h,
		"cpus":       runtime.NumCPU(),
		"gomaxprocs": runtime.GOMAXPROCS(0),
		"go":         runtime.Version(),
		"os_arch":    runtime.GOOS + "/" + runtime.GOARCH,
	}
}
