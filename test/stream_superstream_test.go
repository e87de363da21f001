package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	amqp10 "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/spaolacci/murmur3"

	"github.com/trident-broker/trident/conf"
)

// Super streams (RabbitMQ 3.11's partitioned streams) with
// rabbitmq-stream-go-client v1.8.3: created over the stream protocol
// (CreateSuperStream, which the client sends because the broker announces
// 3.13), published by its super stream producer, read by its super stream
// consumer, and consumed by a single-active group whose members share the
// partitions.

// ssKey is the routing key a test message carries.
func ssKey(m message.StreamMessage) string {
	return m.GetApplicationProperties()["key"].(string)
}

// ssPartitionOf is the partition the client's hash strategy picks for
// key among n: murmur3 (seed 104729, RabbitMQ's clients') modulo n, an
// index into the Partitions answer — computed here independently.
func ssPartitionOf(name, key string, n int) string {
	h := murmur3.New32WithSeed(104729) // Sum32WithSeed trips -race's checkptr
	_, _ = h.Write([]byte(key))
	return fmt.Sprintf("%s-%d", name, h.Sum32()%uint32(n))
}

// ssPublish sends n messages with keys k-from … through p and waits for
// every confirm.
func ssPublish(t *testing.T, p *stream.SuperStreamProducer, from, n int) {
	t.Helper()
	confirms := p.NotifyPublishConfirmation(n)
	for i := from; i < from+n; i++ {
		m := amqp10.NewMessage([]byte("m-" + strconv.Itoa(i)))
		m.ApplicationProperties = map[string]any{"key": "k-" + strconv.Itoa(i)}
		if err := p.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	deadline := time.After(60 * time.Second)
	for got < n {
		select {
		case c := <-confirms:
			for _, s := range c.ConfirmationStatus {
				if !s.IsConfirmed() {
					t.Fatalf("message on %s not confirmed", c.Partition)
				}
				got++
			}
		case <-deadline:
			t.Fatalf("%d of %d confirmed", got, n)
		}
	}
}

// ssRead collects what a super stream consumer receives, by partition.
type ssRead struct {
	mu   sync.Mutex
	keys map[string][]string // partition → keys in order
	offs map[string][]int64
}

func (r *ssRead) handler(ctx stream.ConsumerContext, m *amqp10.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys, r.offs = map[string][]string{}, map[string][]int64{}
	}
	p := ctx.Consumer.GetStreamName()
	r.keys[p] = append(r.keys[p], m.ApplicationProperties["key"].(string))
	r.offs[p] = append(r.offs[p], ctx.Consumer.GetOffset())
}

func (r *ssRead) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ks := range r.keys {
		n += len(ks)
	}
	return n
}

// TestStreamSuperStreamProduceConsume: the client declares a super stream
// of 3 partitions; Partitions lists them in order; its hash producer
// publishes 300 keyed messages, each stored on the partition murmur3
// gives its key; its super stream consumer reads all 300; Route answers
// the partition bound with a key, which a key-routing producer and an
// AMQP publish to the super stream's exchange reach; DeleteSuperStream
// removes the exchange and partitions.
func TestStreamSuperStreamProduceConsume(t *testing.T) {
	b, addr := streamBroker(t)
	env := streamEnv(t, addr, "guest", "guest")
	const name, n = "orders", 300
	if err := env.DeclareSuperStream(name, stream.NewPartitionsOptions(3)); err != nil {
		t.Fatalf("DeclareSuperStream: %v", err)
	}
	parts, err := env.QueryPartitions(name)
	if want := []string{"orders-0", "orders-1", "orders-2"}; err != nil || !slices.Equal(parts, want) {
		t.Fatalf("partitions %v %v, want %v", parts, err, want)
	}
	// Again: stream already exists, which the client's environment takes
	// as success (as with RabbitMQ); nothing changes.
	if err := env.DeclareSuperStream(name, stream.NewPartitionsOptions(2)); err != nil {
		t.Fatalf("declared twice: %v", err)
	}
	if again, _ := env.QueryPartitions(name); !slices.Equal(again, parts) {
		t.Fatalf("a second declaration changed the partitions to %v", again)
	}
	if _, err := env.QueryPartitions("no-such"); !errors.Is(err, stream.StreamDoesNotExist) {
		t.Fatalf("partitions of an unknown super stream: %v", err)
	}

	p, err := env.NewSuperStreamProducer(name, stream.NewSuperStreamProducerOptions(stream.NewHashRoutingStrategy(ssKey)))
	if err != nil {
		t.Fatal(err)
	}
	ssPublish(t, p, 0, n)
	_ = p.Close()

	read := &ssRead{}
	c, err := env.NewSuperStreamConsumer(name, read.handler, stream.NewSuperStreamConsumerOptions().
		SetOffset(stream.OffsetSpecification{}.First()).SetConsumerName("reader"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "all messages read", func() bool { return read.count() >= n })
	_ = c.Close()
	read.mu.Lock()
	per := map[string]int{}
	for part, keys := range read.keys {
		for _, k := range keys {
			if want := ssPartitionOf(name, k, 3); part != want {
				t.Errorf("key %s on %s, murmur3 says %s", k, part, want)
			}
		}
		per[part] = len(keys)
	}
	read.mu.Unlock()
	if read.count() != n || len(per) != 3 {
		t.Fatalf("read %d messages over %v", read.count(), per)
	}

	// Key routing: Route answers the partition bound with the key.
	if r, err := env.QueryRoute(name, "2"); err != nil || !slices.Equal(r, []string{"orders-2"}) {
		t.Fatalf("route 2: %v %v", r, err)
	}
	if r, err := env.QueryRoute(name, "nine"); err != nil || len(r) != 0 {
		t.Fatalf("route of an unbound key: %v %v", r, err)
	}
	kp, err := env.NewSuperStreamProducer(name, stream.NewSuperStreamProducerOptions(
		stream.NewKeyRoutingStrategy(func(message.StreamMessage) string { return "1" })))
	if err != nil {
		t.Fatal(err)
	}
	ssPublish(t, kp, n, 1)
	_ = kp.Close()
	st, err := env.StreamStats("orders-1")
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := st.CommittedChunkId(); last != int64(per["orders-1"]) {
		t.Fatalf("orders-1 last offset %d after the key-routed message, want %d", last, per["orders-1"])
	}

	// AMQP: a publish to the super stream's exchange with key 0 lands on orders-0.
	_, ch := channel(t, b.URL)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	if err := ch.Publish(name, "0", true, false, amqp.Publishing{Body: []byte("amqp"), Headers: amqp.Table{"key": "amqp"}}); err != nil {
		t.Fatal(err)
	}
	if c := <-confirms; !c.Ack {
		t.Fatal("AMQP publish nacked")
	}
	got := spConsume(t, env, "orders-0", stream.OffsetSpecification{}.Offset(int64(per["orders-0"])))
	got.wait(t, 1)
	got.mu.Lock()
	if body := string(got.msgs[0].GetData()); body != "amqp" {
		t.Errorf("orders-0 at offset %d holds %q", per["orders-0"], body)
	}
	got.mu.Unlock()

	if err := env.DeleteSuperStream(name); err != nil {
		t.Fatalf("DeleteSuperStream: %v", err)
	}
	for _, s := range parts {
		if ok, _ := env.StreamExists(s); ok {
			t.Fatalf("%s left after delete", s)
		}
	}
	if _, err := env.QueryPartitions(name); !errors.Is(err, stream.StreamDoesNotExist) {
		t.Fatalf("partitions after delete: %v", err)
	}
	if err := env.DeleteSuperStream(name); !errors.Is(err, stream.StreamDoesNotExist) {
		t.Fatalf("second delete: %v", err)
	}
}

// TestStreamSuperStreamSAC: three super stream consumers of group "app"
// with single active consumer get one partition each (RabbitMQ spreads a
// super stream's partitions over the group); the one on orders-… goes
// after storing an offset, another member takes its partition and
// continues right after the stored offset.
func TestStreamSuperStreamSAC(t *testing.T) {
	_, addr := streamBroker(t)
	env := streamEnv(t, addr, "guest", "guest")
	const name = "sac-ss"
	if err := env.DeclareSuperStream(name, stream.NewPartitionsOptions(3)); err != nil {
		t.Fatal(err)
	}
	p, err := env.NewSuperStreamProducer(name, stream.NewSuperStreamProducerOptions(stream.NewHashRoutingStrategy(ssKey)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ssPublish(t, p, 0, 90)

	type member struct {
		env  *stream.Environment
		read *ssRead
	}
	var ms [3]member
	for i := range ms {
		menv := streamEnv(t, addr, "guest", "guest")
		read := &ssRead{}
		update := func(partition string, active bool) stream.OffsetSpecification {
			if off, err := menv.QueryOffset("app", partition); err == nil {
				return stream.OffsetSpecification{}.Offset(off + 1)
			}
			return stream.OffsetSpecification{}.First()
		}
		_, err := menv.NewSuperStreamConsumer(name, read.handler, stream.NewSuperStreamConsumerOptions().
			SetConsumerName("app").SetManualCommit().SetOffset(stream.OffsetSpecification{}.First()).
			SetSingleActiveConsumer(stream.NewSingleActiveConsumer(update)))
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = member{menv, read}
	}
	// The group settles with one partition per member: publish rounds
	// until one round's messages went, per partition, to one member, a
	// different one for each partition (a round published while the
	// group still rebalances may reach a member that is stepping down).
	last := func() map[string]int64 {
		out := map[string]int64{}
		for i := range 3 {
			s := fmt.Sprintf("%s-%d", name, i)
			st, err := env.StreamStats(s)
			if err != nil {
				t.Fatal(err)
			}
			out[s], _ = st.CommittedChunkId()
		}
		return out
	}
	// got: which members received offsets in (from, to] of each partition,
	// and how many such deliveries there were.
	got := func(from, to map[string]int64) (map[int][]string, int) {
		by, n := map[int][]string{}, 0
		for i, m := range ms {
			m.read.mu.Lock()
			for part, offs := range m.read.offs {
				hit := false
				for _, o := range offs {
					if o > from[part] && o <= to[part] {
						hit, n = true, n+1
					}
				}
				if hit {
					by[i] = append(by[i], part)
				}
			}
			m.read.mu.Unlock()
		}
		return by, n
	}
	owner := map[string]int{}
	var by map[int][]string
	sent := 90
	for deadline := time.Now().Add(60 * time.Second); len(owner) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("no round with one partition per member; the last: %v", by)
		}
		from := last()
		ssPublish(t, p, sent, 30)
		sent += 30
		to := last()
		want := int((to[name+"-0"] - from[name+"-0"]) + (to[name+"-1"] - from[name+"-1"]) + (to[name+"-2"] - from[name+"-2"]))
		for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
			if _, n := got(from, to); n >= want {
				break
			}
		}
		by, _ = got(from, to)
		clear(owner)
		for i := range ms {
			if len(by[i]) == 1 {
				owner[by[i][0]] = i
			}
		}
	}

	// From here on, what each member reads shows where it started.
	before := last()
	for i := range ms {
		ms[i].read.mu.Lock()
		ms[i].read.keys, ms[i].read.offs = nil, nil
		ms[i].read.mu.Unlock()
	}
	// The member on partition 1 stores an offset and goes.
	gone := fmt.Sprintf("%s-1", name)
	leaver := owner[gone]
	stored := before[gone] - 5 // neither the start nor where the leaver was
	if err := env.StoreOffset("app", gone, stored); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "offset stored", func() bool { off, err := env.QueryOffset("app", gone); return err == nil && off == stored })
	_ = ms[leaver].env.Close()
	var heir int = -1
	eventually(t, 60*time.Second, gone+" taken over", func() bool {
		for i, m := range ms {
			if i == leaver {
				continue
			}
			m.read.mu.Lock()
			offs := m.read.offs[gone]
			m.read.mu.Unlock()
			if len(offs) > 0 {
				heir = i
				return true
			}
		}
		return false
	})
	ms[heir].read.mu.Lock()
	first := ms[heir].read.offs[gone][0]
	ms[heir].read.mu.Unlock()
	if first != stored+1 {
		t.Fatalf("member %d took %s over from offset %d, want %d (after the stored offset)", heir, gone, first, stored+1)
	}
}

// TestStreamSuperStreamPermissions: a user without configure on the
// exchange, or on the partitions, is refused the create and nothing is
// declared; without configure the delete is refused too.
func TestStreamSuperStreamPermissions(t *testing.T) {
	b, addr := streamBroker(t, func(*conf.Config) {})
	us := b.n.Users()
	for _, u := range []struct{ name, conf string }{
		{"ss-none", "^$"},
		{"ss-xonly", "^perm$"}, // the exchange but not its partitions
	} {
		if err := us.PutUser(u.name, "pw", nil); err != nil {
			t.Fatal(err)
		}
		if err := us.SetPermissions(u.name, "/", u.conf, ".*", ".*"); err != nil {
			t.Fatal(err)
		}
	}
	admin := streamEnv(t, addr, "guest", "guest")
	for _, user := range []string{"ss-none", "ss-xonly"} {
		env := streamEnv(t, addr, user, "pw")
		if err := env.DeclareSuperStream("perm", stream.NewPartitionsOptions(2)); !errors.Is(err, stream.CodeAccessRefused) {
			t.Fatalf("%s: create: %v, want access refused", user, err)
		}
		if _, err := admin.QueryPartitions("perm"); !errors.Is(err, stream.StreamDoesNotExist) {
			t.Fatalf("%s: a refused create declared the exchange: %v", user, err)
		}
		for _, s := range []string{"perm-0", "perm-1"} {
			if ok, _ := admin.StreamExists(s); ok {
				t.Fatalf("%s: a refused create declared %s", user, s)
			}
		}
	}
	if err := admin.DeclareSuperStream("perm", stream.NewPartitionsOptions(2)); err != nil {
		t.Fatal(err)
	}
	if err := streamEnv(t, addr, "ss-xonly", "pw").DeleteSuperStream("perm"); !errors.Is(err, stream.CodeAccessRefused) {
		t.Fatalf("delete without configure on the partitions: %v", err)
	}
	if ps, err := admin.QueryPartitions("perm"); err != nil || len(ps) != 2 {
		t.Fatalf("a refused delete changed the super stream: %v %v", ps, err)
	}
}

// TestStreamSuperStreamHTTPAndCLI: a super stream declared over the HTTP
// API by hand (the exchange with x-super-stream, the streams, the
// bindings with x-stream-partition-order, as RabbitMQ users do) is one
// for the stream protocol's Partitions and Route; tridentctl declares
// one with --partitions or --routing-keys and deletes it, through the
// API; a user without configure is refused and nothing is declared.
func TestStreamSuperStreamHTTPAndCLI(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) { c.Stream.Listen = "127.0.0.1:0" })
	addr := b.n.StreamAddr().(*net.TCPAddr)
	env := streamEnv(t, addr, "guest", "guest")
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}

	api.expect(http.StatusCreated, "PUT", "/api/exchanges/%2F/hand", map[string]any{"type": "direct", "durable": true,
		"arguments": map[string]any{"x-super-stream": true}})
	for i, p := range []string{"hand-b", "hand-a"} {
		api.expect(http.StatusCreated, "PUT", "/api/queues/%2F/"+p, map[string]any{"durable": true,
			"arguments": map[string]any{"x-queue-type": "stream"}})
		api.expect(http.StatusCreated, "POST", "/api/bindings/%2F/e/hand/q/"+p, map[string]any{"routing_key": p[5:],
			"arguments": map[string]any{"x-stream-partition-order": i}})
	}
	if ps, err := env.QueryPartitions("hand"); err != nil || !slices.Equal(ps, []string{"hand-b", "hand-a"}) {
		t.Fatalf("partitions of the API-declared super stream: %v %v", ps, err)
	}
	if r, err := env.QueryRoute("hand", "a"); err != nil || !slices.Equal(r, []string{"hand-a"}) {
		t.Fatalf("route a: %v %v", r, err)
	}
	// The API's exchange object says it is a super stream, with its partitions.
	var x struct {
		SuperStream bool     `json:"super_stream"`
		Partitions  []string `json:"partitions"`
	}
	if err := json.Unmarshal(api.expect(http.StatusOK, "GET", "/api/exchanges/%2F/hand", nil), &x); err != nil ||
		!x.SuperStream || !slices.Equal(x.Partitions, []string{"hand-b", "hand-a"}) {
		t.Fatalf("exchange object: %+v %v", x, err)
	}

	run := func(want int, user string, args ...string) string {
		t.Helper()
		pass := "pw"
		if user == "guest" {
			pass = "guest"
		}
		return runCtl(t, base, user, pass, want, args...)
	}
	run(0, "guest", "declare", "super-stream", "cli", "--partitions", "3")
	if ps, err := env.QueryPartitions("cli"); err != nil || !slices.Equal(ps, []string{"cli-0", "cli-1", "cli-2"}) {
		t.Fatalf("partitions of the CLI's super stream: %v %v", ps, err)
	}
	if r, err := env.QueryRoute("cli", "1"); err != nil || !slices.Equal(r, []string{"cli-1"}) {
		t.Fatalf("route 1: %v %v", r, err)
	}
	run(0, "guest", "declare", "super-stream", "keyed", "--routing-keys", "eu,us")
	if r, err := env.QueryRoute("keyed", "us"); err != nil || !slices.Equal(r, []string{"keyed-us"}) {
		t.Fatalf("route us: %v %v", r, err)
	}
	if out := run(1, "guest", "declare", "super-stream", "cli", "--partitions", "2"); !strings.Contains(out, "already exists") {
		t.Fatalf("second declaration: %s", out)
	}
	run(2, "guest", "declare", "super-stream", "both", "--partitions", "2", "--routing-keys", "a")

	// Without configure on the exchange: refused, nothing declared.
	us := b.n.Users()
	if err := us.PutUser("ss-mgmt", "pw", []string{"management"}); err != nil {
		t.Fatal(err)
	}
	if err := us.SetPermissions("ss-mgmt", "/", "^$", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	if out := run(1, "ss-mgmt", "declare", "super-stream", "denied", "--partitions", "2"); !strings.Contains(out, "Access refused") {
		t.Fatalf("declare without configure: %s", out)
	}
	if _, err := env.QueryPartitions("denied"); !errors.Is(err, stream.StreamDoesNotExist) {
		t.Fatalf("a refused declaration left a super stream: %v", err)
	}
	if ok, _ := env.StreamExists("denied-0"); ok {
		t.Fatal("a refused declaration left a partition")
	}
	if out := run(1, "ss-mgmt", "delete", "super-stream", "cli"); !strings.Contains(out, "Access refused") {
		t.Fatalf("delete without configure: %s", out)
	}

	run(0, "guest", "delete", "super-stream", "cli")
	for _, s := range []string{"cli-0", "cli-1", "cli-2"} {
		if ok, _ := env.StreamExists(s); ok {
			t.Fatalf("%s left after tridentctl delete super-stream", s)
		}
	}
	if _, err := env.QueryPartitions("cli"); !errors.Is(err, stream.StreamDoesNotExist) {
		t.Fatalf("partitions after delete: %v", err)
	}
	api.expect(http.StatusCreated, "PUT", "/api/exchanges/%2F/plain", map[string]any{"type": "direct"})
	if body := string(api.expect(http.StatusOK, "GET", "/api/exchanges/%2F/plain", nil)); strings.Contains(body, "super_stream") {
		t.Fatalf("a plain exchange's object: %s", body)
	}
	if out := run(1, "guest", "delete", "super-stream", "plain"); !strings.Contains(out, "not a super stream") {
		t.Fatalf("delete of a plain exchange: %s", out)
	}
}

// TestStreamSuperStreamCluster: on 3 nodes, a super stream of 3
// partitions declared through node 0 has its partitions led by three
// different nodes (each partition's first member, the one that stands
// for election first, is turned by its index); a super stream producer
// on node 1 and a super stream consumer on node 2 move every message.
func TestStreamSuperStreamCluster(t *testing.T) {
	const n = 3
	nodes, addrs := startStreamCluster(t, n)
	envs := make([]*stream.Environment, n)
	for i := range envs {
		envs[i] = streamEnv(t, addrs[i], "guest", "guest")
	}
	const name = "cl-ss"
	if err := envs[0].DeclareSuperStream(name, stream.NewPartitionsOptions(3)); err != nil {
		t.Fatal(err)
	}
	leaders := make([]int, 3)
	for p := range 3 {
		s := fmt.Sprintf("%s-%d", name, p)
		eventually(t, 60*time.Second, "a leader of "+s, func() bool { leaders[p] = leaderIndex(nodes, s); return leaders[p] >= 0 })
	}
	if leaders[0] == leaders[1] || leaders[1] == leaders[2] || leaders[0] == leaders[2] {
		t.Fatalf("partition leaders on nodes %v, want three different nodes", leaders)
	}
	for i, env := range envs {
		eventually(t, 30*time.Second, "partitions on node "+strconv.Itoa(i), func() bool {
			ps, err := env.QueryPartitions(name)
			return err == nil && len(ps) == 3
		})
	}
	p, err := envs[1].NewSuperStreamProducer(name, stream.NewSuperStreamProducerOptions(stream.NewHashRoutingStrategy(ssKey)))
	if err != nil {
		t.Fatal(err)
	}
	ssPublish(t, p, 0, 300)
	_ = p.Close()
	read := &ssRead{}
	c, err := envs[2].NewSuperStreamConsumer(name, read.handler, stream.NewSuperStreamConsumerOptions().
		SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, 60*time.Second, "300 messages through node 2", func() bool { return read.count() >= 300 })
	read.mu.Lock()
	defer read.mu.Unlock()
	for part, keys := range read.keys {
		for _, k := range keys {
			if want := ssPartitionOf(name, k, 3); part != want {
				t.Fatalf("key %s on %s, murmur3 says %s", k, part, want)
			}
		}
	}
}
