package test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/trident-broker/trident/conf"
)

// TestMQTTQoS0DropForSlowSubscriber: a clean session whose subscriber
// stops reading keeps at most mqtt.max_queued_qos0 undelivered QoS 0
// messages and drops the newer ones (counted), as Mosquitto and RabbitMQ
// drop QoS 0 for a slow subscriber; QoS 1 messages are never dropped; a
// persistent session keeps everything. Every QoS 0 message is either
// delivered or counted as dropped.
func TestMQTTQoS0DropForSlowSubscriber(t *testing.T) {
	const limit, n, q1 = 100, 20000, 50
	b, base := mgmtBroker(t, func(c *conf.Config) {
		c.MQTT.Listen, c.MQTT.WSListen = "127.0.0.1:0", ""
		anonMQTT(c)
		c.MQTT.MaxQueuedQoS0 = limit
	})
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	murl := "http://" + b.n.MetricsAddr().String()
	url := "tcp://" + b.mqttAddr()
	payload := strings.Repeat("x", 1024)
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprintf("clean=%v", clean), func(t *testing.T) {
			id := fmt.Sprintf("slow-%v", clean)
			gate := make(chan struct{})
			var mu sync.Mutex
			var got0, got1 int
			sub := dial3(t, url, id, clean, func(o *mqtt3.ClientOptions) {
				o.SetDefaultPublishHandler(func(_ mqtt3.Client, m mqtt3.Message) {
					<-gate // the subscriber stops reading until the gate opens
					mu.Lock()
					if m.Qos() == 0 {
						got0++
					} else {
						got1++
					}
					mu.Unlock()
				})
			})
			sub.subscribe(t, "slow/#", 1)
			v, _ := b.n.Broker().VHost("/")
			q, err := v.Queue("mqtt-subscription-"+id+"qos1", nil)
			if err != nil {
				t.Fatal(err)
			}
			pub := dial3(t, url, id+"-pub", true)
			var maxReady atomic.Int64
			for i := 0; i < n; i++ {
				pub.Publish("slow/a", 0, false, payload)
				if i%500 == 0 {
					if r := int64(q.Status().Ready); r > maxReady.Load() {
						maxReady.Store(r)
					}
				}
			}
			pub.publish(t, "slow/sync", 1, false, "sync") // after every QoS 0 one
			// The publisher's QoS 0 messages have all reached the queue
			// once the sync message has: ready stops changing.
			var st0 int
			eventually(t, 10*time.Second, "the backlog to settle", func() bool {
				r := q.Status().Ready
				time.Sleep(100 * time.Millisecond)
				st0 = q.Status().Ready
				return r == st0
			})
			dropped := q.MsgStats().DropBehind
			if clean {
				if st0 > limit+1 || maxReady.Load() > limit+1 {
					t.Fatalf("clean session: %d ready (max seen %d), limit %d", st0, maxReady.Load(), limit)
				}
				if dropped == 0 {
					t.Fatal("clean session: nothing dropped for a subscriber that reads nothing")
				}
			} else if dropped != 0 {
				t.Fatalf("persistent session: %d dropped", dropped)
			}
			// The management API reports what the queue counted, and
			// Prometheus the sum over the queues (the clean session's is
			// the only one that drops; it is gone once its client is).
			eventually(t, 5*time.Second, "drop_behind in the API and the metrics", func() bool {
				qs := api.object("/api/queues/%2F/" + q.Name())
				ms, _ := qs["message_stats"].(map[string]any)
				if clean {
					return ms != nil && num(ms["drop_behind"]) == float64(dropped) &&
						value(scrape(t, murl+"/metrics"), "trident_queue_messages_dropped_behind_total") == float64(dropped)
				}
				return ms == nil || num(ms["drop_behind"]) == 0
			})
			for i := 0; i < q1; i++ {
				pub.publish(t, "slow/b", 1, false, fmt.Sprint(i))
			}
			if r := q.Status().Ready; r != st0+q1 || q.MsgStats().DropBehind != dropped {
				t.Fatalf("QoS 1: ready %d, want %d; dropped %d → %d", r, st0+q1, dropped, q.MsgStats().DropBehind)
			}
			close(gate)
			eventually(t, 30*time.Second, "every message delivered or counted dropped", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return got1 == q1+1 && uint64(got0)+dropped == n
			})
			t.Logf("clean=%v: %d QoS 0 delivered, %d dropped, at most %d ready", clean, got0, dropped, maxReady.Load())
		})
	}
}
