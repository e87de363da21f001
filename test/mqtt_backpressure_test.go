package test

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"
)

// TestMQTTStalledSubscriberBackPressure: a paho subscriber (QoS 1) that
// stops reading while a paho publisher sends it large QoS 1 and QoS 0
// messages is held back by its connection's output watermark, not by its
// receive maximum: its consumer is paused with far fewer than 1024
// messages unacknowledged, and the rest waits in its queue. Once it reads
// again it gets every QoS 1 message, in order (QoS 0 ones in order too;
// a clean session may drop some of them).
func TestMQTTStalledSubscriberBackPressure(t *testing.T) {
	b := startMQTTBroker(t)
	url := "tcp://" + b.mqttAddr()
	const n, size = 1200, 64 << 10 // 75 MiB; every tenth message QoS 0
	gate := make(chan struct{})
	var mu sync.Mutex
	var got1, got0 []uint32
	sub := dial3(t, url, "stalled", true, func(o *mqtt3.ClientOptions) {
		o.SetDefaultPublishHandler(func(_ mqtt3.Client, m mqtt3.Message) {
			<-gate // the subscriber stops reading until the gate opens
			i := binary.BigEndian.Uint32(m.Payload())
			mu.Lock()
			if m.Qos() == 0 {
				got0 = append(got0, i)
			} else {
				got1 = append(got1, i)
			}
			mu.Unlock()
		})
	})
	sub.subscribe(t, "stall/#", 1)
	v, _ := b.n.Broker().VHost("/")
	q, err := v.Queue("mqtt-subscription-stalledqos1", nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := dial3(t, url, "stalled-pub", true)
	want1 := 0
	for i := range n {
		// A payload of its own: the client writes a QoS 0 publish on
		// its own goroutine after Publish returns.
		payload := make([]byte, size)
		binary.BigEndian.PutUint32(payload, uint32(i))
		qos := byte(1)
		if i%10 == 9 {
			qos = 0
		} else {
			want1++
		}
		tok := pub.Publish("stall/t", qos, false, payload)
		if qos == 1 && (!tok.WaitTimeout(10*time.Second) || tok.Error() != nil) {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
	var ready, unacked int
	eventually(t, 10*time.Second, "the backlog to settle", func() bool {
		r := q.Status().Ready
		time.Sleep(200 * time.Millisecond)
		st := q.Status()
		ready, unacked = st.Ready, st.Unacked
		return r == ready
	})
	t.Logf("stalled: %d ready, %d unacknowledged", ready, unacked)
	if ready == 0 || unacked >= 768 {
		t.Fatalf("stalled subscriber: %d ready, %d unacknowledged: not paused by its output (receive maximum 1024)", ready, unacked)
	}
	close(gate)
	eventually(t, 60*time.Second, "every QoS 1 message delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got1) == want1
	})
	mu.Lock()
	defer mu.Unlock()
	next := uint32(0)
	for k, i := range got1 {
		if i != next {
			t.Fatalf("QoS 1 message %d is number %d, want %d", k, i, next)
		}
		next++
		if next%10 == 9 {
			next++
		}
	}
	for k := 1; k < len(got0); k++ {
		if got0[k] <= got0[k-1] {
			t.Fatalf("QoS 0 messages out of order: %d after %d", got0[k], got0[k-1])
		}
	}
	t.Logf("%d QoS 1 and %d of %d QoS 0 messages delivered", len(got1), len(got0), n-want1)
}
