package test

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"
	amqp10 "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// Single active consumer on streams (RabbitMQ 3.11's semantics): members
// of a name's group wait while one is active; when it goes, the next one
// takes over after the group's stored offset. Over the stream protocol
// (rabbitmq-stream-go-client, with its ConsumerUpdate exchange), AMQP
// (consumer arguments x-single-active-consumer and x-stream-consumer-name)
// and STOMP (the same names as subscription headers).

// sacMember is one stream-protocol member: what it received and the
// ConsumerUpdate calls it answered.
type sacMember struct {
	spConsumed
	umu     sync.Mutex
	updates []bool
}

func (m *sacMember) told() string {
	m.umu.Lock()
	defer m.umu.Unlock()
	return fmt.Sprint(m.updates)
}

func (m *sacMember) got() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.offsets)
}

// spSACConsumer subscribes a member of group on name; its ConsumerUpdate
// answer is what applications answer: after the group's stored offset
// (read with query offset), from first if none; or, fixed ≥ 0, that offset.
func spSACConsumer(t *testing.T, env *stream.Environment, name, group string, fixed int64, onMsg func(stream.ConsumerContext, int64)) (*sacMember, *stream.Consumer) {
	t.Helper()
	m := &sacMember{}
	update := func(_ string, active bool) stream.OffsetSpecification {
		m.umu.Lock()
		m.updates = append(m.updates, active)
		m.umu.Unlock()
		if fixed >= 0 {
			return stream.OffsetSpecification{}.Offset(fixed)
		}
		if off, err := env.QueryOffset(group, name); err == nil {
			return stream.OffsetSpecification{}.Offset(off + 1)
		}
		return stream.OffsetSpecification{}.First()
	}
	opts := stream.NewConsumerOptions().SetConsumerName(group).SetManualCommit().
		SetOffset(stream.OffsetSpecification{}.First()).
		SetSingleActiveConsumer(stream.NewSingleActiveConsumer(update))
	cons, err := env.NewConsumer(name, func(ctx stream.ConsumerContext, msg *amqp10.Message) {
		m.handler(ctx, msg)
		if onMsg != nil {
			onMsg(ctx, ctx.Consumer.GetOffset())
		}
	}, opts)
	if err != nil {
		t.Fatalf("NewConsumer (single active): %v", err)
	}
	return m, cons
}

func offsetsFrom(from, to int64) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// TestStreamSACProtocol: of two members of group "grp" only the first
// receives (it is told it is active; the other is told nothing); the
// first stores offset 59 and its connection closes; the second is told it
// is active, answers with the stored offset + 1 and receives 60…99 — no
// gap, and again only what the first had after its stored offset — and
// then what is published next. A third member starts where its own
// answer says.
func TestStreamSACProtocol(t *testing.T) {
	_, addr := streamBroker(t)
	env := streamEnv(t, addr, "guest", "guest")
	const name = "sac-sp"
	if err := env.DeclareStream(name, nil); err != nil {
		t.Fatal(err)
	}
	spPublishConfirmed(t, env, name, 0, 100)

	envA := streamEnv(t, addr, "guest", "guest")
	a, _ := spSACConsumer(t, envA, name, "grp", -1, func(ctx stream.ConsumerContext, off int64) {
		if off == 59 {
			if err := ctx.Consumer.StoreCustomOffset(59); err != nil {
				t.Errorf("store offset: %v", err)
			}
		}
	})
	envB := streamEnv(t, addr, "guest", "guest")
	b, _ := spSACConsumer(t, envB, name, "grp", -1, nil)
	a.wait(t, 100)
	if got := a.got(); !slices.Equal(got, offsetsFrom(0, 100)) {
		t.Fatalf("active member got offsets %v", got)
	}
	waitUntil(t, "offset 59 stored", func() bool { off, err := env.QueryOffset("grp", name); return err == nil && off == 59 })
	time.Sleep(300 * time.Millisecond) // what the waiting one would get has had time to come
	if n := len(b.got()); n != 0 || a.told() != "[true]" || b.told() != "[]" {
		t.Fatalf("waiting member got %d messages; updates %s and %s", n, a.told(), b.told())
	}

	_ = envA.Close() // the active member's connection goes
	b.wait(t, 40)
	if got := b.got(); !slices.Equal(got, offsetsFrom(60, 100)) {
		t.Fatalf("after takeover the second member got offsets %v, want 60…99", got)
	}
	if b.told() != "[true]" {
		t.Fatalf("second member's updates %s", b.told())
	}
	spPublishConfirmed(t, env, name, 100, 5)
	b.wait(t, 45)
	if got := b.got(); !slices.Equal(got, offsetsFrom(60, 105)) {
		t.Fatalf("second member got %v", got)
	}

	// A third member answers its activation with offset 30 (not the
	// stored 59 + 1): it starts where its answer says. (Below the stored
	// offset: the client drops what comes before the offset it answered,
	// so only a lower one shows that the broker read the answer.)
	envC := streamEnv(t, addr, "guest", "guest")
	c, _ := spSACConsumer(t, envC, name, "grp", 30, nil)
	_ = envB.Close()
	c.wait(t, 75)
	if got := c.got(); !slices.Equal(got, offsetsFrom(30, 105)) || c.told() != "[true]" {
		t.Fatalf("third member got %v, updates %s", got, c.told())
	}
}

// TestStreamSACAMQP: two basic.consume members of group "grp"; the first
// receives and acks 0…29 and holds 30…39 unacked, the second receives
// nothing; the management API lists them active/single_active and
// inactive/waiting; the first's connection is killed (its socket closed)
// and the second receives 30…49 (what was acked is the group's offset),
// then what is published next.
func TestStreamSACAMQP(t *testing.T) {
	br, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	const name = "sac-amqp"
	declareStream(t, br.URL, name, streamArgs())
	_, pub := channel(t, br.URL)
	streamPublish(t, pub, "", name, numbered("m", 0, 50), nil)
	args := amqp.Table{"x-stream-offset": "first", "x-single-active-consumer": true, "x-stream-consumer-name": "grp"}

	var raw net.Conn
	connA, err := amqp.DialConfig(br.URL, amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		raw = c
		return c, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer connA.Close()
	chA, err := connA.Channel()
	if err != nil {
		t.Fatal(err)
	}
	consume := func(ch *amqp.Channel, tag string) <-chan amqp.Delivery {
		if err := ch.Qos(10, 0, false); err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume(name, tag, false, false, false, false, args)
		if err != nil {
			t.Fatalf("consume %s: %v", tag, err)
		}
		return d
	}
	dA := consume(chA, "a")
	_, chB := channel(t, br.URL)
	dB := consume(chB, "b")

	recv := func(ds <-chan amqp.Delivery, who string) amqp.Delivery {
		select {
		case d := <-ds:
			return d
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no delivery", who)
		}
		return amqp.Delivery{}
	}
	for i := 0; i < 40; i++ {
		d := recv(dA, "first member")
		if string(d.Body) != "m"+strconv.Itoa(i) {
			t.Fatalf("first member's delivery %d is %q", i, d.Body)
		}
		if i < 30 {
			_ = d.Ack(false) // 39 comes only once 29's ack freed credit
		}
	}
	select {
	case d := <-dB:
		t.Fatalf("waiting member got %q", d.Body)
	case <-time.After(300 * time.Millisecond):
	}
	cs := api.list("/api/consumers/%2F")
	status := map[string]string{}
	for _, c := range cs {
		status[fmt.Sprint(c["consumer_tag"])] = fmt.Sprint(c["active"], " ", c["activity_status"])
	}
	if status["a"] != "true single_active" || status["b"] != "false waiting" {
		t.Fatalf("consumer list: %v", status)
	}

	_ = raw.Close() // killed: no close handshake
	for i := 30; i < 50; i++ {
		d := recv(dB, "second member")
		if string(d.Body) != "m"+strconv.Itoa(i) || d.Headers["x-stream-offset"] != int64(i) {
			t.Fatalf("after takeover: %q at offset %v, want m%d", d.Body, d.Headers["x-stream-offset"], i)
		}
		_ = d.Ack(false)
	}
	streamPublish(t, pub, "", name, numbered("m", 50, 3), nil)
	for i := 50; i < 53; i++ {
		if d := recv(dB, "second member"); string(d.Body) != "m"+strconv.Itoa(i) {
			t.Fatalf("then %q, want m%d", d.Body, i)
		}
	}
	// Without a name the group has no stored offset to take over from.
	_, chC := channel(t, br.URL)
	_ = chC.Qos(1, 0, false)
	if _, err := chC.Consume(name, "c", false, false, false, false, amqp.Table{"x-single-active-consumer": true}); err == nil {
		t.Fatal("x-single-active-consumer without x-stream-consumer-name accepted")
	}
}

// TestStreamSACSTOMP: the same over STOMP subscription headers; the
// first subscriber's connection is closed and the second goes on after
// what the first acked.
func TestStreamSACSTOMP(t *testing.T) {
	b := stBroker(t, func(c *conf.Config) {})
	const name = "sac-stomp"
	declareStream(t, b.URL, name, streamArgs())
	_, pub := channel(t, b.URL)
	streamPublish(t, pub, "", name, numbered("m", 0, 20), nil)
	sub := func(c *stomp.Conn) *stomp.Subscription {
		s, err := c.Subscribe("/amq/queue/"+name, stomp.AckClientIndividual,
			stomp.SubscribeOpt.Header("prefetch-count", "5"), stomp.SubscribeOpt.Header("x-stream-offset", "first"),
			stomp.SubscribeOpt.Header("x-single-active-consumer", "true"), stomp.SubscribeOpt.Header("x-stream-consumer-name", "grp"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// SUBSCRIBE has no answer: the second subscribes once the first
	// received, so that it is the second member.
	c1, c2 := stDial(t, b), stDial(t, b)
	s1 := sub(c1)
	var s2 *stomp.Subscription
	for i := 0; i < 8; i++ {
		m := stRecv(t, s1)
		if string(m.Body) != "m"+strconv.Itoa(i) {
			t.Fatalf("first subscriber's message %d is %q", i, m.Body)
		}
		if i == 0 {
			s2 = sub(c2)
		}
		if i < 3 {
			if err := c1.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case m := <-s2.C:
		t.Fatalf("waiting subscriber got %v", m)
	case <-time.After(300 * time.Millisecond):
	}
	_ = c1.MustDisconnect()
	for i := 3; i < 8; i++ {
		if m := stRecv(t, s2); string(m.Body) != "m"+strconv.Itoa(i) {
			t.Fatalf("after takeover %q, want m%d", m.Body, i)
		}
	}
}

// TestStreamSACCluster: in a 3-node cluster, two members of one group on
// two different nodes (each a member of the stream, whichever is its
// home): one group, so only the first receives; its connection is killed
// and the other takes over after what the first acked.
func TestStreamSACCluster(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare("csac", true, false, false, false, amqp.Table{"x-queue-type": "stream", "x-initial-cluster-size": int32(3)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "a leader with 3 members", func() bool {
		var q struct {
			Leader  string   `json:"leader"`
			Members []string `json:"members"`
		}
		code := nodes[0].api(t, "GET", "/api/queues/%2F/csac", nil, &q)
		return code == 200 && q.Leader != "" && len(q.Members) == 3
	})
	streamPublish(t, ch, "", "csac", numbered("m", 0, 30), nil)
	args := amqp.Table{"x-stream-offset": "first", "x-single-active-consumer": true, "x-stream-consumer-name": "grp"}

	var raw net.Conn
	connA, err := amqp.DialConfig(nodes[1].url(), amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		raw = c
		return c, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer connA.Close()
	chA, err := connA.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := chA.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	dA, err := chA.Consume("csac", "a", false, false, false, false, args)
	if err != nil {
		t.Fatal(err)
	}
	recv := func(ds <-chan amqp.Delivery, who string) amqp.Delivery {
		select {
		case d := <-ds:
			return d
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no delivery", who)
		}
		return amqp.Delivery{}
	}
	var dB <-chan amqp.Delivery
	for i := 0; i < 30; i++ {
		d := recv(dA, "member on "+nodes[1].name)
		if string(d.Body) != "m"+strconv.Itoa(i) {
			t.Fatalf("first member's delivery %d is %q", i, d.Body)
		}
		if i < 20 {
			_ = d.Ack(false) // 29 comes only once 19's ack freed credit
		}
		if i == 0 {
			// The second member subscribes once the first is active.
			_, chB := dialNode(t, nodes[2])
			if err := chB.Qos(10, 0, false); err != nil {
				t.Fatal(err)
			}
			if dB, err = chB.Consume("csac", "b", false, false, false, false, args); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case d := <-dB:
		t.Fatalf("waiting member on %s got %q", nodes[2].name, d.Body)
	case <-time.After(time.Second):
	}
	_ = raw.Close() // killed
	for i := 20; i < 30; i++ {
		d := recv(dB, "member on "+nodes[2].name)
		if string(d.Body) != "m"+strconv.Itoa(i) {
			t.Fatalf("after takeover %q, want m%d", d.Body, i)
		}
	}
}

// TestStreamSACProtocolCluster: stream-protocol members of one group on
// two different nodes of a 3-node cluster (each node advertises itself for
// the stream, so each member's connection is to its own node): one group,
// so only the first receives and is told it is active; it stores offset
// 59 and its connection closes; the other is told it is active and
// receives 60…99.
func TestStreamSACProtocolCluster(t *testing.T) {
	const n = 3
	_, addrs := startStreamCluster(t, n)
	env0 := streamEnv(t, addrs[0], "guest", "guest")
	const name = "sac-spc"
	if err := env0.DeclareStream(name, &stream.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	envA, envB := streamEnv(t, addrs[1], "guest", "guest"), streamEnv(t, addrs[2], "guest", "guest")
	for _, env := range []*stream.Environment{envA, envB} {
		eventually(t, 20*time.Second, "stream on every node", func() bool {
			ok, err := env.StreamExists(name)
			return err == nil && ok
		})
	}
	spPublishConfirmed(t, env0, name, 0, 100)
	a, _ := spSACConsumer(t, envA, name, "grp", -1, func(ctx stream.ConsumerContext, off int64) {
		if off == 59 {
			if err := ctx.Consumer.StoreCustomOffset(59); err != nil {
				t.Errorf("store offset: %v", err)
			}
		}
	})
	a.wait(t, 1)
	b, _ := spSACConsumer(t, envB, name, "grp", -1, nil)
	a.wait(t, 100)
	if got := a.got(); !slices.Equal(got, offsetsFrom(0, 100)) {
		t.Fatalf("active member got offsets %v", got)
	}
	eventually(t, 20*time.Second, "offset 59 stored, seen from node 2", func() bool {
		off, err := envB.QueryOffset("grp", name)
		return err == nil && off == 59
	})
	time.Sleep(time.Second)
	if n := len(b.got()); n != 0 || a.told() != "[true]" || b.told() != "[]" {
		t.Fatalf("waiting member got %d messages; updates %s and %s", n, a.told(), b.told())
	}
	_ = envA.Close()
	b.wait(t, 40)
	if got := b.got(); !slices.Equal(got, offsetsFrom(60, 100)) || b.told() != "[true]" {
		t.Fatalf("after takeover the second member got offsets %v (updates %s), want 60…99", got, b.told())
	}
}

// TestStreamSACHomeFailover: a clustered stream's single-active groups
// live on its home (its first member alive); members on other nodes join
// them through upstream consumers. Two members of one group on the two
// nodes that are not the home; the active one acks the first 20 of 30
// messages; the home is killed (SIGKILL). The group forms again on the
// next member: exactly one consumer is active, it gets what was not acked
// (20…29, redelivered) and then the messages published after the kill,
// and the other gets nothing.
func TestStreamSACHomeFailover(t *testing.T) { sacHomeFailover(t, false, false) }

// TestStreamSACHomeKilledAtOnce: as TestStreamSACHomeFailover, but the
// home is killed as soon as the active member has 20…29 (its acks of
// 0…19 reached the home a moment before, and the home had no time to
// write the group's offset): the member's node, which saw the acks, keeps
// the group's offset, and the takeover starts after 19 all the same.
func TestStreamSACHomeKilledAtOnce(t *testing.T) { sacHomeFailover(t, false, true) }

// TestStreamSACHomeFailoverAcked: as TestStreamSACHomeFailover, but the
// member that was active acks what it holds (20…29) once the home is
// killed, as an application whose connection lives on does. Its credit
// free, it would receive again if the group formed twice (on each
// survivor, each member active in its own); it must not: one group, one
// active member, from after the group's stored offset.
func TestStreamSACHomeFailoverAcked(t *testing.T) { sacHomeFailover(t, true, false) }

// sacHomeFailover: ackHeld, the member that was active acks what it holds
// after the kill; atOnce, the home is killed as soon as that member has
// its messages.
func sacHomeFailover(t *testing.T, ackHeld, atOnce bool) {
	nodes := startCluster(t, 3)
	members := declareClusterStream(t, nodes, "hsac")
	var home *cnode
	var others []*cnode
	for _, nd := range nodes {
		if nd.name == members[0] {
			home = nd
		} else {
			others = append(others, nd)
		}
	}
	if home == nil {
		t.Fatalf("members %v name no node", members)
	}
	t.Logf("members %v: home %s", members, home.name)
	_, pch := dialNode(t, others[0])
	streamPublish(t, pch, "", "hsac", numbered("m", 0, 30), nil)
	args := amqp.Table{"x-stream-offset": "first", "x-single-active-consumer": true, "x-stream-consumer-name": "grp"}

	type member struct {
		name string
		ds   <-chan amqp.Delivery
	}
	var ms []member
	for i, nd := range others {
		_, c := dialNode(t, nd)
		if err := c.Qos(10, 0, false); err != nil {
			t.Fatal(err)
		}
		ds, err := c.Consume("hsac", "c"+strconv.Itoa(i), false, false, false, false, args)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, member{nd.name, ds})
		if i == 0 {
			// The first is active: it receives 0…9 and acks 0…19 as they come.
			for j := 0; j < 20; j++ {
				select {
				case d := <-ds:
					if string(d.Body) != "m"+strconv.Itoa(j) {
						t.Fatalf("active member's delivery %d is %q", j, d.Body)
					}
					_ = d.Ack(false)
				case <-time.After(30 * time.Second):
					t.Fatalf("active member: no delivery %d", j)
				}
			}
		}
	}
	// 20…29 reach the active member unacked; the other waits.
	var held []amqp.Delivery
	for j := 20; j < 30; j++ {
		select {
		case d := <-ms[0].ds:
			if string(d.Body) != "m"+strconv.Itoa(j) {
				t.Fatalf("active member's delivery %d is %q", j, d.Body)
			}
			held = append(held, d)
		case <-time.After(30 * time.Second):
			t.Fatalf("active member: no delivery %d", j)
		}
	}
	if !atOnce {
		select {
		case d := <-ms[1].ds:
			t.Fatalf("waiting member got %q before the failover", d.Body)
		case <-time.After(time.Second):
		}
	}

	if err := home.p.Kill(); err != nil {
		t.Fatal(err)
	}
	if ackHeld {
		for _, d := range held {
			_ = d.Ack(false)
		}
	}
	// Published after the kill, through a survivor (retried while the
	// stream elects a leader if the home led it).
	for j := 30; j < 40; j++ {
		streamPublishRetry(t, others, "hsac", "m"+strconv.Itoa(j))
	}
	got := map[string][]string{}
	seen := map[string]bool{}
	deadline := time.After(60 * time.Second)
	// What was not acked comes again (20…29; in ackHeld, unless the acks
	// were stored before the group formed again), and what was published
	// after the kill.
	done := func() bool {
		for j := 30; j < 40; j++ {
			if !seen["m"+strconv.Itoa(j)] {
				return false
			}
		}
		return ackHeld || len(seen) >= 20
	}
	for !done() {
		select {
		case d := <-ms[0].ds:
			got[ms[0].name] = append(got[ms[0].name], string(d.Body))
			seen[string(d.Body)] = true
			_ = d.Ack(false)
		case d := <-ms[1].ds:
			got[ms[1].name] = append(got[ms[1].name], string(d.Body))
			seen[string(d.Body)] = true
			_ = d.Ack(false)
		case <-deadline:
			t.Fatalf("after the home's kill, 60 s: got %v", got)
		}
	}
	// Anything late to the other member would break the single-active rule.
	quiet := time.After(2 * time.Second)
	for done := false; !done; {
		select {
		case d := <-ms[0].ds:
			got[ms[0].name] = append(got[ms[0].name], string(d.Body))
		case d := <-ms[1].ds:
			got[ms[1].name] = append(got[ms[1].name], string(d.Body))
		case <-quiet:
			done = true
		}
	}
	t.Logf("after the home's kill: %v", got)
	if len(got) != 1 {
		t.Fatalf("both members received after the failover (one group, one active): %v", got)
	}
	for _, bodies := range got {
		for _, b := range bodies {
			if n, _ := strconv.Atoi(b[1:]); n < 20 {
				t.Fatalf("%s came again after it was acked: %v", b, got)
			}
		}
	}
}

// TestStreamSACHomeStoresOffset: a single-active member on a member of a
// clustered stream that is not its home joins the group on the home
// through an upstream consumer; its acks store the group's offset (the
// named offset of the group's name), which every node holds (what a
// takeover after the home's death starts after). The member acks 0…19 of
// 30 and stays subscribed; every node shows "grp" at 19.
func TestStreamSACHomeStoresOffset(t *testing.T) {
	nodes := startCluster(t, 3)
	members := declareClusterStream(t, nodes, "hsoff")
	_, ch := dialNode(t, nodes[0])
	var other *cnode
	for _, nd := range nodes {
		if nd.name != members[0] {
			other = nd
			break
		}
	}
	streamPublish(t, ch, "", "hsoff", numbered("m", 0, 30), nil)
	_, c := dialNode(t, other)
	if err := c.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := c.Consume("hsoff", "c", false, false, false, false,
		amqp.Table{"x-stream-offset": "first", "x-single-active-consumer": true, "x-stream-consumer-name": "grp"})
	if err != nil {
		t.Fatal(err)
	}
	for j := 0; j < 30; j++ {
		select {
		case d := <-ds:
			if string(d.Body) != "m"+strconv.Itoa(j) {
				t.Fatalf("delivery %d is %q", j, d.Body)
			}
			if j < 20 {
				_ = d.Ack(false)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no delivery %d", j)
		}
	}
	for _, nd := range nodes {
		eventually(t, 20*time.Second, "grp's offset 19 on "+nd.name, func() bool {
			off, _ := nd.namedOffset("hsoff", "grp")
			return off == 19
		})
	}
}

// TestStreamSACHomeKilledSTOMP: a STOMP single-active member on a member
// of a clustered stream that is not its home acks 0…19 of 30 (client
// acks); the home is killed (SIGKILL) as soon as the member has the 30:
// both survivors hold the group's offset 19, although the home may have
// died before it wrote it (the member's node, which saw the acks, keeps
// it).
func TestStreamSACHomeKilledSTOMP(t *testing.T) {
	stomps := make([]string, 3)
	for i := range stomps {
		port, err := testbin.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		stomps[i] = "127.0.0.1:" + strconv.Itoa(port)
	}
	nodes := startClusterWith(t, 3, func(i int) []string { return []string{"--stomp-listen", stomps[i]} })
	members := declareClusterStream(t, nodes, "hstomp")
	_, ch := dialNode(t, nodes[0])
	var home *cnode
	var others []*cnode
	for _, nd := range nodes {
		if nd.name == members[0] {
			home = nd
		} else {
			others = append(others, nd)
		}
	}
	if home == nil {
		t.Fatalf("members %v name no node", members)
	}
	streamPublish(t, ch, "", "hstomp", numbered("m", 0, 30), nil)
	sc, err := stomp.Dial("tcp", stomps[others[0].i], stomp.ConnOpt.Login("guest", "guest"), stomp.ConnOpt.Host("/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Disconnect() })
	sub, err := sc.Subscribe("/amq/queue/hstomp", stomp.AckClientIndividual,
		stomp.SubscribeOpt.Header("prefetch-count", "10"), stomp.SubscribeOpt.Header("x-stream-offset", "first"),
		stomp.SubscribeOpt.Header("x-single-active-consumer", "true"), stomp.SubscribeOpt.Header("x-stream-consumer-name", "grp"))
	if err != nil {
		t.Fatal(err)
	}
	for j := 0; j < 30; j++ {
		var m *stomp.Message
		select {
		case m = <-sub.C:
		case <-time.After(30 * time.Second):
			t.Fatalf("no message %d", j)
		}
		if m == nil || m.Err != nil {
			t.Fatalf("message %d: %v", j, m)
		}
		if string(m.Body) != "m"+strconv.Itoa(j) {
			t.Fatalf("message %d is %q", j, m.Body)
		}
		if j < 20 {
			if err := sc.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := home.p.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, nd := range others {
		eventually(t, 30*time.Second, "grp's offset 19 on "+nd.name, func() bool {
			off, _ := nd.namedOffset("hstomp", "grp")
			return off == 19
		})
	}
}
