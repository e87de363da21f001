package test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

// Hash exchanges (x-consistent-hash as RabbitMQ's consistent hash exchange
// plugin, x-modulus-hash as its sharding plugin's) with real clients.

func hxKeys(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, seed+1))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strconv.FormatUint(r.Uint64(), 36)
	}
	return keys
}

// hxPub is a channel in confirm mode with its one confirm listener.
type hxPub struct {
	ch       *amqp.Channel
	confirms chan amqp.Confirmation
}

func hxConfirming(t testing.TB, ch *amqp.Channel) hxPub {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return hxPub{ch, ch.NotifyPublish(make(chan amqp.Confirmation, 30000))}
}

// hxPublish publishes one message per key to x (the key as routing key and
// body; mk may set more) and waits for every confirm.
func hxPublish(t testing.TB, p hxPub, x string, keys []string, mk func(k string) amqp.Publishing) {
	t.Helper()
	ch, confirms := p.ch, p.confirms
	for _, k := range keys {
		m := amqp.Publishing{}
		if mk != nil {
			m = mk(k)
		}
		m.Body = []byte(k)
		if err := ch.PublishWithContext(context.Background(), x, k, false, false, m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", i)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d confirms", i, len(keys))
		}
	}
}

// hxDrain consumes want messages in all from queues and returns, for each
// body, the queues it was found in (in arrival order).
func hxDrain(t testing.TB, ch *amqp.Channel, queues []string, want int) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	type msg struct{ q, body string }
	in := make(chan msg, 1024)
	var tags []string
	for i, q := range queues {
		tag := fmt.Sprintf("hx-drain-%s-%d", q, i)
		ds, err := ch.Consume(q, tag, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for d := range ds {
				in <- msg{q, string(d.Body)}
			}
		}()
		tags = append(tags, tag)
	}
	defer func() {
		for _, tag := range tags {
			_ = ch.Cancel(tag, false)
		}
	}()
	for n := 0; n < want; n++ {
		select {
		case m := <-in:
			got[m.body] = append(got[m.body], m.q)
		case <-time.After(30 * time.Second):
			t.Fatalf("drained %d of %d messages", n, want)
		}
	}
	select {
	case m := <-in:
		t.Fatalf("an extra message %q in %s", m.body, m.q)
	case <-time.After(200 * time.Millisecond):
	}
	return got
}

// hxOnce returns each key's queue, failing if a key reached two queues.
func hxOnce(t testing.TB, got map[string][]string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(got))
	for k, qs := range got {
		for _, q := range qs {
			if q != qs[0] {
				t.Fatalf("key %q reached %v", k, qs)
			}
		}
		out[k] = qs[0]
	}
	return out
}

func hxDeclare(t testing.TB, ch *amqp.Channel, x string, args amqp.Table, weights map[string]string) []string {
	t.Helper()
	if err := ch.ExchangeDeclare(x, "x-consistent-hash", true, false, false, false, args); err != nil {
		t.Fatalf("declare %s: %v", x, err)
	}
	var qs []string
	for q, w := range weights {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, w, x, false, nil); err != nil {
			t.Fatalf("bind %s with weight %s: %v", q, w, err)
		}
		qs = append(qs, q)
	}
	slices.Sort(qs)
	return qs
}

// 20,000 random keys over weights 1, 2, 1 land within ±5% of each weight
// share; a key always lands in the same queue, after a kill -9 and
// restart too; unbinding a queue moves only its keys.
func TestHashConsistentSpreadRestartUnbind(t *testing.T) {
	p := testbin.Start(t)
	conn, ch := procChannel(t, p)
	weights := map[string]string{"hq0": "1", "hq1": "2", "hq2": "1"}
	qs := hxDeclare(t, ch, "chx", nil, weights)

	keys := hxKeys(20000, 42)
	again := keys[:2000]
	hxPublish(t, hxConfirming(t, ch), "chx", append(slices.Clone(keys), again...), nil)
	first := hxOnce(t, hxDrain(t, ch, qs, len(keys)+len(again)))
	share := map[string]int{}
	for _, q := range first {
		share[q]++
	}
	for q, w := range weights {
		n, _ := strconv.Atoi(w)
		want := float64(len(keys)) * float64(n) / 4
		if got := float64(share[q]); math.Abs(got-want) > 0.05*want {
			t.Errorf("%s (weight %s): %v keys, want %.0f ±5%%", q, w, got, want)
		}
	}
	t.Logf("shares: %v", share)

	// kill -9, restart: the same keys land in the same queues.
	ch = killRestart(t, p, conn)
	pub := hxConfirming(t, ch)
	hxPublish(t, pub, "chx", again, nil)
	after := hxOnce(t, hxDrain(t, ch, qs, len(again)))
	for _, k := range again {
		if after[k] != first[k] {
			t.Fatalf("key %q: %s before the restart, %s after", k, first[k], after[k])
		}
	}

	// Unbind hq1: the keys of hq0 and hq2 stay where they were.
	if err := ch.QueueUnbind("hq1", "2", "chx", nil); err != nil {
		t.Fatal(err)
	}
	hxPublish(t, pub, "chx", again, nil)
	unbound := hxOnce(t, hxDrain(t, ch, qs, len(again)))
	moved := 0
	for _, k := range again {
		switch {
		case first[k] == "hq1":
			moved++
			if unbound[k] == "hq1" {
				t.Fatalf("key %q still reached the unbound queue", k)
			}
		case unbound[k] != first[k]:
			t.Fatalf("key %q moved from %s to %s when hq1 was unbound", k, first[k], unbound[k])
		}
	}
	if moved == 0 {
		t.Fatal("hq1 had none of the keys")
	}
}

func TestHashConsistentHeaderPropertyAndErrors(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)

	// hash-header: the header decides, whatever the routing key.
	qs := hxDeclare(t, ch, "hh", amqp.Table{"hash-header": "user"}, map[string]string{"hh0": "1", "hh1": "1", "hh2": "1"})
	users := hxKeys(300, 9)
	pub := hxConfirming(t, ch)
	hxPublish(t, pub, "hh", users, func(k string) amqp.Publishing {
		return amqp.Publishing{Headers: amqp.Table{"user": "u-" + k}}
	})
	byUser := hxOnce(t, hxDrain(t, ch, qs, len(users)))
	// Same headers, other routing keys (the body still names the user).
	for i, u := range users {
		if err := ch.PublishWithContext(context.Background(), "hh", "other-"+strconv.Itoa(i), false, false,
			amqp.Publishing{Headers: amqp.Table{"user": "u-" + u}, Body: []byte(u)}); err != nil {
			t.Fatal(err)
		}
		if c := <-pub.confirms; !c.Ack {
			t.Fatal("nack")
		}
	}
	again := hxOnce(t, hxDrain(t, ch, qs, len(users)))
	spread := map[string]bool{}
	for _, u := range users {
		if again[u] != byUser[u] {
			t.Fatalf("header %q: %s, then %s with another routing key", u, byUser[u], again[u])
		}
		spread[byUser[u]] = true
	}
	if len(spread) != 3 {
		t.Fatalf("300 header values reached %d of 3 queues", len(spread))
	}

	// hash-property message_id, declared over the HTTP API.
	api.expect(201, "PUT", "/api/exchanges/%2F/hm", map[string]any{"type": "x-consistent-hash", "durable": true,
		"arguments": map[string]any{"hash-property": "message_id"}})
	for _, q := range qs {
		api.expect(201, "POST", "/api/bindings/%2F/e/hm/q/"+q, map[string]any{"routing_key": "1"})
	}
	ids := hxKeys(200, 10)
	for round := range 2 {
		hxPublish(t, pub, "hm", ids, func(k string) amqp.Publishing {
			return amqp.Publishing{MessageId: "id-" + k, Headers: amqp.Table{"round": int32(round)}}
		})
	}
	hxOnce(t, hxDrain(t, ch, qs, 2*len(ids))) // each id in one queue both times

	// Bad arguments and weights: 406 over AMQP, 400 over the API.
	for _, tc := range []struct {
		args amqp.Table
		text string
	}{
		{amqp.Table{"hash-header": "a", "hash-property": "message_id"}, "mutually exclusive"},
		{amqp.Table{"hash-property": "app_id"}, "Unsupported property: app_id"},
	} {
		_, bad := channel(t, b.URL)
		err := bad.ExchangeDeclare("bad", "x-consistent-hash", false, false, false, false, tc.args)
		if e, ok := err.(*amqp.Error); !ok || e.Code != amqp.PreconditionFailed || !strings.Contains(e.Reason, tc.text) {
			t.Fatalf("declare with %v: %v, want 406 %q", tc.args, err, tc.text)
		}
	}
	for key, text := range map[string]string{"abc": `The binding key must be an integer: <<"abc">>`, "0": "greater than 0"} {
		_, bad := channel(t, b.URL)
		err := bad.QueueBind("hh0", key, "hh", false, nil)
		if e, ok := err.(*amqp.Error); !ok || e.Code != amqp.PreconditionFailed || !strings.Contains(e.Reason, text) {
			t.Fatalf("bind with weight %q: %v, want 406 %q", key, err, text)
		}
	}
	data := api.expect(400, "POST", "/api/bindings/%2F/e/hm/q/hh0", map[string]any{"routing_key": "abc"})
	if !strings.Contains(string(data), "must be an integer") {
		t.Fatalf("API bad weight: %s", data)
	}

	// Both types are listed by /api/overview.
	var types []string
	for _, xt := range api.object("/api/overview")["exchange_types"].([]any) {
		types = append(types, xt.(map[string]any)["name"].(string))
	}
	for _, want := range []string{"x-consistent-hash", "x-modulus-hash"} {
		if !slices.Contains(types, want) {
			t.Fatalf("exchange_types %v lack %s", types, want)
		}
	}
}

// hxModulus is x-modulus-hash's choice: FNV-1a (64-bit) of the routing key,
// murmur3's fmix64, modulo the number of bound queues in name order.
func hxModulus(key string, sorted []string) string {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return sorted[h%uint64(len(sorted))]
}

// x-modulus-hash, imported from definitions: the routing key's hash modulo
// the number of bound queues.
func TestHashModulusFromDefinitions(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	defs := map[string]any{
		"exchanges": []map[string]any{{"name": "mx", "vhost": "/", "type": "x-modulus-hash", "durable": true,
			"auto_delete": false, "internal": false, "arguments": map[string]any{}}},
		"queues": []map[string]any{
			{"name": "mq-b", "vhost": "/", "durable": true, "auto_delete": false, "arguments": map[string]any{}},
			{"name": "mq-a", "vhost": "/", "durable": true, "auto_delete": false, "arguments": map[string]any{}},
			{"name": "mq-c", "vhost": "/", "durable": true, "auto_delete": false, "arguments": map[string]any{}}},
		"bindings": []map[string]any{
			{"source": "mx", "vhost": "/", "destination": "mq-b", "destination_type": "queue", "routing_key": "x", "arguments": map[string]any{}},
			{"source": "mx", "vhost": "/", "destination": "mq-a", "destination_type": "queue", "routing_key": "y", "arguments": map[string]any{}},
			{"source": "mx", "vhost": "/", "destination": "mq-c", "destination_type": "queue", "routing_key": "", "arguments": map[string]any{}}},
	}
	api.expect(204, "POST", "/api/definitions", defs)
	if x := api.object("/api/exchanges/%2F/mx"); x["type"] != "x-modulus-hash" {
		t.Fatalf("imported exchange: %v", x)
	}
	sorted := []string{"mq-a", "mq-b", "mq-c"}
	keys := hxKeys(3000, 77)
	pub := hxConfirming(t, ch)
	hxPublish(t, pub, "mx", keys, nil)
	got := hxOnce(t, hxDrain(t, ch, sorted, len(keys)))
	for _, k := range keys {
		if want := hxModulus(k, sorted); got[k] != want {
			t.Fatalf("key %q: %s, want %s", k, got[k], want)
		}
	}
	// Declared over AMQP too; one queue fewer, modulo 2.
	if err := ch.ExchangeDeclare("mx2", "x-modulus-hash", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"mq-c", "mq-a"} {
		if err := ch.QueueBind(q, "any", "mx2", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	hxPublish(t, pub, "mx2", keys[:500], nil)
	got = hxOnce(t, hxDrain(t, ch, sorted, 500))
	for _, k := range keys[:500] {
		if want := hxModulus(k, []string{"mq-a", "mq-c"}); got[k] != want {
			t.Fatalf("mx2 key %q: %s, want %s", k, got[k], want)
		}
	}
}

// The one permission check holds for hash exchanges: no write on the
// exchange, no publish; no configure, no declare.
func TestHashExchangePermissions(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	hxDeclare(t, ch, "px", nil, map[string]string{"pq": "1"})
	api.expect(201, "PUT", "/api/users/hx", map[string]any{"password": "hx", "tags": ""})
	api.expect(201, "PUT", "/api/permissions/%2F/hx", map[string]any{"configure": "^pq$", "write": "^pq$", "read": ".*"})
	url := "amqp://hx:hx@" + b.Addr + "/"

	_, uch := channel(t, url)
	err := uch.ExchangeDeclare("px2", "x-consistent-hash", false, false, false, false, nil)
	if amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("declare without configure: %v, want 403", err)
	}
	_, uch = channel(t, url)
	closed := uch.NotifyClose(make(chan *amqp.Error, 1))
	if err := uch.PublishWithContext(context.Background(), "px", "k", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.AccessRefused {
			t.Fatalf("publish without write: %v, want 403", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("publish without write: channel not closed")
	}
	if q, err := ch.QueueDeclarePassive("pq", true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("pq after a refused publish: %d messages (%v)", q.Messages, err)
	}
}

// In a cluster every node routes a key to the same queue: the same keys
// published through two nodes land in the same queues.
func TestHashConsistentClusterNodesAgree(t *testing.T) {
	nodes := startCluster(t, 3)
	// A new cluster enables its release's stable flags just after it
	// forms; the hash types are unknown until hash_exchanges is on.
	eventually(t, 60*time.Second, "feature flag hash_exchanges enabled", func() bool {
		f, err := flagOn(nodes[0], "hash_exchanges")
		return err == nil && f.State == "enabled"
	})
	_, ch0 := dialNode(t, nodes[0])
	qs := hxDeclare(t, ch0, "cx", nil, map[string]string{"cq0": "1", "cq1": "2", "cq2": "1"})
	// The topology is committed on every node before it is used there.
	for _, nd := range nodes[1:] {
		eventually(t, 20*time.Second, "bindings on "+nd.name, func() bool {
			var bs []map[string]any
			code := nd.api(t, "GET", "/api/exchanges/%2F/cx/bindings/source", nil, &bs)
			return code == 200 && len(bs) == 3
		})
	}
	keys := hxKeys(3000, 5)
	_, ch1 := dialNode(t, nodes[1])
	hxPublish(t, hxConfirming(t, ch1), "cx", keys, nil)
	via1 := hxOnce(t, hxDrain(t, ch0, qs, len(keys)))
	_, ch2 := dialNode(t, nodes[2])
	hxPublish(t, hxConfirming(t, ch2), "cx", keys, nil)
	via2 := hxOnce(t, hxDrain(t, ch0, qs, len(keys)))
	for _, k := range keys {
		if via1[k] != via2[k] {
			t.Fatalf("key %q: %s through %s, %s through %s", k, via1[k], nodes[1].name, via2[k], nodes[2].name)
		}
	}
}
