package test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// allProtocols enables every listener of the node on loopback.
func allProtocols(c *conf.Config) {
	c.MQTT.Listen, c.MQTT.WSListen = "127.0.0.1:0", "127.0.0.1:0"
	anonMQTT(c) // the MQTT clients here send no credentials
	c.STOMP.Listen, c.STOMP.WSListen = "127.0.0.1:0", "127.0.0.1:0"
	c.HTTP.Listen = "127.0.0.1:0"
	c.HTTP.StatsInterval = 100 * time.Millisecond
}

// TestAlarmThresholdsRaiseAlarms sets the memory watermark and the disk
// free limit below and above what the machine has: the node's watchers
// raise both alarms and the API shows them.
func TestAlarmThresholdsRaiseAlarms(t *testing.T) {
	b := startBroker(t, allProtocols, func(c *conf.Config) {
		c.MemoryHighWatermarkBytes = 1 << 20
		c.DiskFreeLimit = 1 << 62 // more than any disk has free
		c.DiskFreeCheckInterval = 50 * time.Millisecond
	})
	waitFor(t, func() bool { return len(b.n.Broker().Alarms().Active()) == 2 })
	a := apiClient{t: t, base: "http://" + b.n.HTTPAddr().String(), user: "guest", pass: "guest"}
	nodes := a.list("/api/nodes")
	if len(nodes) != 1 || nodes[0]["mem_alarm"] != true || nodes[0]["disk_free_alarm"] != true {
		t.Fatalf("/api/nodes: %v", nodes)
	}
	if nodes[0]["disk_free_limit"] != float64(1<<62) || nodes[0]["mem_limit"] != float64(1<<20) {
		t.Fatalf("/api/nodes limits: mem_limit %v disk_free_limit %v", nodes[0]["mem_limit"], nodes[0]["disk_free_limit"])
	}
	a.expect(http.StatusServiceUnavailable, "GET", "/api/health/checks/alarms", nil)
}

// TestAlarmBlocksPublishersOfEveryProtocol raises a resource alarm while
// AMQP, MQTT and STOMP clients publish: AMQP gets connection.blocked and
// the MQTT and STOMP publishes stall (no PUBACK, no RECEIPT, nothing
// routed), consumers of every protocol keep draining what was published
// before, the API shows the alarm; once it clears every held publish goes
// through and every message arrives exactly once.
func TestAlarmBlocksPublishersOfEveryProtocol(t *testing.T) {
	b := startBroker(t, allProtocols)
	api := apiClient{t: t, base: "http://" + b.n.HTTPAddr().String(), user: "guest", pass: "guest"}
	ctx := context.Background()

	// An AMQP consumer queue that sees every publish.
	pubConn, pub := channel(t, b.URL)
	_, sub := channel(t, b.URL)
	if _, err := sub.QueueDeclare("alarm-all", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := sub.QueueBind("alarm-all", "alarm.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	blockings := pubConn.NotifyBlocked(make(chan amqp.Blocking, 4))

	// MQTT and STOMP consumers of the same messages.
	msub := dial3(t, "tcp://"+b.mqttAddr(), "alarm-sub", true)
	msub.subscribe(t, "alarm/#", 1)
	mpub := dial3(t, "tcp://"+b.mqttAddr(), "alarm-pub", true)
	ssub := stDial(t, b)
	sSub, err := ssub.Subscribe("/topic/alarm.#", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	stSync(t, ssub)
	spub := stDial(t, b)

	publishAMQP := func(body string) *amqp.DeferredConfirmation {
		dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "amq.topic", "alarm.amqp", false, false, amqp.Publishing{Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		return dc
	}
	publishSTOMP := func(body string) <-chan error {
		done := make(chan error, 1)
		go func() { done <- spub.Send("/topic/alarm.stomp", "text/plain", []byte(body), stomp.SendOpt.Receipt) }()
		return done
	}

	// Before the alarm: one message per protocol, all confirmed.
	publishAMQP("amqp-before").Wait()
	mpub.publish(t, "alarm/mqtt", 1, false, "mqtt-before")
	if err := <-publishSTOMP("stomp-before"); err != nil {
		t.Fatal(err)
	}
	amqpDeliveries, err := sub.Consume("alarm-all", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for range 3 {
		got[string(receive(t, amqpDeliveries).Body)]++
	}

	b.n.Broker().Alarms().Set("disk", true)
	const n = 5
	var dcs []*amqp.DeferredConfirmation
	var mtoks []interface {
		WaitTimeout(time.Duration) bool
		Error() error
	}
	var sdone []<-chan error
	for i := range n {
		dcs = append(dcs, publishAMQP(fmt.Sprintf("amqp-%d", i)))
		mtoks = append(mtoks, mpub.Publish("alarm/mqtt", 1, false, fmt.Sprintf("mqtt-%d", i)))
		sdone = append(sdone, publishSTOMP(fmt.Sprintf("stomp-%d", i)))
	}
	select {
	case bl := <-blockings:
		if !bl.Active || bl.Reason != "low on disk" {
			t.Fatalf("got %+v, want connection.blocked 'low on disk'", bl)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection.blocked")
	}
	// Consumers of every protocol drained the messages from before.
	for _, want := range []string{"amqp-before", "mqtt-before", "stomp-before"} {
		if m := msub.receive(t); m.payload != want {
			t.Logf("mqtt subscriber got %q", m.payload) // order across publishers is free
		}
		stRecv(t, sSub)
	}
	// Nothing published during the alarm is acknowledged or routed.
	noDelivery(t, amqpDeliveries, 300*time.Millisecond)
	msub.none(t, 10*time.Millisecond)
	stNone(t, sSub, 10*time.Millisecond)
	if mtoks[0].WaitTimeout(10 * time.Millisecond) {
		t.Fatalf("MQTT PUBLISH acknowledged during the alarm (err %v)", mtoks[0].Error())
	}
	select {
	case err := <-sdone[0]:
		t.Fatalf("STOMP RECEIPT during the alarm (err %v)", err)
	default:
	}
	if dcs[0].Acked() {
		t.Fatal("AMQP publish confirmed during the alarm")
	}
	nodes := api.list("/api/nodes")
	if nodes[0]["disk_free_alarm"] != true || nodes[0]["mem_alarm"] != false {
		t.Fatalf("/api/nodes during the alarm: disk_free_alarm %v mem_alarm %v", nodes[0]["disk_free_alarm"], nodes[0]["mem_alarm"])
	}
	api.expect(http.StatusServiceUnavailable, "GET", "/api/health/checks/alarms", nil)

	b.n.Broker().Alarms().Set("disk", false)
	select {
	case bl := <-blockings:
		if bl.Active {
			t.Fatalf("got %+v, want connection.unblocked", bl)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection.unblocked")
	}
	for i := range n {
		if ok, err := dcs[i].WaitContext(ctx); !ok || err != nil {
			t.Fatalf("AMQP publish %d nacked", i)
		}
		if !mtoks[i].WaitTimeout(5*time.Second) || mtoks[i].Error() != nil {
			t.Fatalf("MQTT publish %d: %v", i, mtoks[i].Error())
		}
		select {
		case err := <-sdone[i]:
			if err != nil {
				t.Fatalf("STOMP send %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("STOMP send %d: no receipt after the alarm cleared", i)
		}
	}
	for range 3 * n {
		got[string(receive(t, amqpDeliveries).Body)]++
	}
	noDelivery(t, amqpDeliveries, 100*time.Millisecond)
	var keys []string
	for k, c := range got {
		if c != 1 {
			t.Errorf("%q arrived %d times", k, c)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) != 3+3*n {
		t.Fatalf("got %d distinct messages, want %d: %v", len(keys), 3+3*n, keys)
	}
	for range 3 * n {
		msub.receive(t)
		stRecv(t, sSub)
	}
	if nodes := api.list("/api/nodes"); nodes[0]["disk_free_alarm"] != false {
		t.Fatalf("/api/nodes after the alarm: disk_free_alarm %v", nodes[0]["disk_free_alarm"])
	}
	api.expect(http.StatusOK, "GET", "/api/health/checks/alarms", nil)
}
