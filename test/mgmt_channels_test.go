package test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// TestMgmtChannelDetails checks that /api/channels shows each AMQP channel
// with its consumers, prefetch, unacked, confirm and tx state, and that
// /api/connections counts bytes and messages.
func TestMgmtChannelDetails(t *testing.T) {
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	conn := dial(t, b.URL)
	ch1, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch1.QueueDeclare("chq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch1.Qos(7, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch1.Consume("chq", "c1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch2.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := ch2.PublishWithContext(context.Background(), "", "chq", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		receive(t, ds) // left unacked
	}
	var chs []map[string]any
	waitUntil(t, "channels listed with details", func() bool {
		chs = a.list("/api/channels")
		return len(chs) == 2 && num(chs[0]["messages_unacknowledged"]) == 3
	})
	c1, c2 := chs[0], chs[1]
	if num(c1["number"]) != 1 || num(c1["consumer_count"]) != 1 || num(c1["prefetch_count"]) != 7 || c1["confirm"] != false {
		t.Errorf("channel 1: %v", c1)
	}
	if num(c2["number"]) != 2 || num(c2["consumer_count"]) != 0 || c2["confirm"] != true {
		t.Errorf("channel 2: %v", c2)
	}
	cs := a.list("/api/connections")
	if len(cs) != 1 || num(cs[0]["recv_oct"]) == 0 || num(cs[0]["send_oct"]) == 0 {
		t.Errorf("connection byte counters: %v", cs)
	}
}

// TestMgmtVHostMetadataSurvivesRestart: a vhost's description and tags are
// stored with the vhost, not only in the API's memory.
func TestMgmtVHostMetadataSurvivesRestart(t *testing.T) {
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	a.expect(201, "PUT", "/api/vhosts/meta-v", map[string]any{"description": "orders of the shop", "tags": "prod,eu"})
	b.restart()
	base = "http://" + b.n.HTTPAddr().String()
	a = apiClient{t: t, base: base, user: "guest", pass: "guest"}
	v := a.object("/api/vhosts/meta-v")
	tags, _ := v["tags"].([]any)
	if v["description"] != "orders of the shop" || len(tags) != 2 || tags[0] != "prod" || tags[1] != "eu" {
		t.Fatalf("vhost after restart: %v", v)
	}
}

// TestMgmtSTOMPConnectionCounters: STOMP connections report bytes and
// messages to the management API, as AMQP ones do.
func TestMgmtSTOMPConnectionCounters(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) { c.STOMP.Listen = "127.0.0.1:0" })
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	c := stDial(t, b)
	sub, err := c.Subscribe("/queue/st-counters", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send("/queue/st-counters", "text/plain", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	stRecv(t, sub)
	var cs []map[string]any
	waitUntil(t, "STOMP connection counted", func() bool {
		cs = a.list("/api/connections")
		return len(cs) == 1 && num(cs[0]["recv_oct"]) > 0 && num(cs[0]["send_oct"]) > 0
	})
	if p, _ := cs[0]["protocol"].(string); !strings.HasPrefix(p, "STOMP") {
		t.Fatalf("protocol %q", p)
	}
}
