package test

import (
	"sync"
	"testing"
	"time"

	"github.com/trident-broker/trident/conf"
)

// Issue 42 item 1: the rate sampler reads MQTT connections through their
// counters alone. A paho client publishing at about 100 messages a second
// shows that rate (within a wide band: the machine is shared) in
// /api/connections, next to an idle client at 0; both fall to 0 when it
// stops.
func TestMgmtMQTTConnectionRates(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	addr := "tcp://" + b.mqttAddr()
	guest := func(o *mqttOpts) { o.SetUsername("guest").SetPassword("guest") }
	pub := dial3(t, addr, "rates-pub", true, guest)
	dial3(t, addr, "rates-idle", true, guest)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				pub.Publish("rates/t", 0, false, "0123456789")
			}
		}
	}()
	conns := func() (busy, idle map[string]any) {
		for _, c := range a.list("/api/connections") {
			switch c["client_properties"].(map[string]any)["client_id"] {
			case "rates-pub":
				busy = c
			case "rates-idle":
				idle = c
			}
		}
		if busy == nil || idle == nil {
			t.Fatalf("connections: busy %v idle %v", busy, idle)
		}
		return busy, idle
	}
	rate := func(c map[string]any, path ...string) float64 {
		m := c
		for _, p := range path[:len(path)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				return -1
			}
			m = sub
		}
		return num(m[path[len(path)-1]].(map[string]any)["rate"])
	}
	var seen float64
	waitUntil(t, "a publish rate near 100/s", func() bool {
		busy, idle := conns()
		seen = rate(busy, "message_stats", "publish_details")
		if r := rate(idle, "recv_oct_details"); r != 0 {
			t.Errorf("idle connection: recv_oct rate %v", r)
		}
		return seen >= 20 && seen <= 500 && rate(busy, "recv_oct_details") > 0
	})
	close(stop)
	wg.Wait()
	waitUntil(t, "rates back to 0", func() bool {
		busy, _ := conns()
		return rate(busy, "message_stats", "publish_details") == 0 && rate(busy, "recv_oct_details") == 0
	})
}
