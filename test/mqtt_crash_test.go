package test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/trident-broker/trident/test/testbin"
)

// TestMQTTCrashPersistentSessionAndRetained kills the real binary with
// SIGKILL: QoS 1 messages acknowledged with PUBACK to a persistent
// session's queue, the session's subscription and a retained message must
// all be there after the restart.
func TestMQTTCrashPersistentSessionAndRetained(t *testing.T) {
	p, url := startMQTTBinary(t)

	sub := dial3(t, url, "crash-sub", false)
	sub.subscribe(t, "crash/#", 1)
	sub.Disconnect(100)

	pub := dial3(t, url, "crash-pub", true)
	pub.publish(t, "crash/retained", 1, true, "kept")
	const n = 500
	publishQoS1(t, pub, "crash/x", n, strconv.Itoa)
	killRestartMQTT(t, p, url)

	sub2 := dial3(t, url, "crash-sub", false)
	seen := map[string]bool{}
	retained := 0
	deadline := time.After(30 * time.Second)
	for len(seen) < n {
		select {
		case m := <-sub2.msgs:
			if m.topic == "crash/retained" {
				retained++
				continue
			}
			seen[m.payload] = true
		case <-deadline:
			t.Fatalf("after kill -9: %d of %d acknowledged messages", len(seen), n)
		}
	}
	// The retained message survived as well: a new subscription gets it.
	other := dial3(t, url, "crash-other", true)
	other.subscribe(t, "crash/+", 1)
	if m := other.receive(t); m.topic != "crash/retained" || m.payload != "kept" || !m.retain {
		t.Fatalf("retained after kill -9: %+v", m)
	}
	// The subscription survived: a new publish reaches the session.
	pub2 := dial3(t, url, "crash-pub2", true)
	pub2.publish(t, "crash/y", 1, false, "live")
	for {
		select {
		case m := <-sub2.msgs:
			if m.payload == "live" {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal(fmt.Sprintf("no live message after restart (retained copies seen: %d)", retained))
		}
	}
}

// waitMQTT waits until the MQTT port accepts a connection.
func waitMQTT(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := tryDial3(url, "probe", true)
		if err == nil {
			c.Disconnect(10)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("MQTT at %s not up: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMQTTPagedSessionSurvivesKill: an offline persistent session's queue
// holds far more QoS 1 messages than its in-memory window (16), so most of
// them are on disk; after kill -9 the session gets every one, in order.
func TestMQTTPagedSessionSurvivesKill(t *testing.T) {
	p, url := startMQTTBinary(t, "--queues-window-messages", "16")
	sub := dial3(t, url, "paged-sub", false)
	sub.subscribe(t, "paged/#", 1)
	sub.Disconnect(100)

	pub := dial3(t, url, "paged-pub", true)
	const n = 3000
	payload := func(i int) string { return fmt.Sprintf("%05d", i) }
	publishQoS1(t, pub, "paged/x", n, payload)
	killRestartMQTT(t, p, url)
	sub2 := dial3(t, url, "paged-sub", false)
	for i := 0; i < n; i++ {
		select {
		case m := <-sub2.msgs:
			if want := payload(i); m.payload != want {
				t.Fatalf("after kill -9, message %d is %q, want %q", i, m.payload, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("after kill -9: %d of %d acknowledged messages", i, n)
		}
	}
}

// startMQTTBinary starts the real binary with an MQTT listener (anonymous
// clients allowed) and extra flags, and returns it and the MQTT URL.
func startMQTTBinary(t *testing.T, extra ...string) (*testbin.Proc, string) {
	t.Helper()
	port, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := testbin.Start(t, append(append([]string{"--mqtt-listen", addr, "--mqtt-ws-listen", ""}, testbin.AnonMQTTFlags()...), extra...)...)
	url := "tcp://" + addr
	waitMQTT(t, url)
	return p, url
}

// publishQoS1 publishes n QoS 1 messages payload(0..n-1) to topic and
// waits for every PUBACK.
func publishQoS1(t *testing.T, pub *client3, topic string, n int, payload func(int) string) {
	t.Helper()
	toks := make([]interface{ WaitTimeout(time.Duration) bool }, 0, n)
	for i := 0; i < n; i++ {
		toks = append(toks, pub.Publish(topic, 1, false, payload(i)))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(30 * time.Second) {
			t.Fatalf("no PUBACK for message %d", i)
		}
	}
}

// killRestartMQTT kills p with SIGKILL and starts it again.
func killRestartMQTT(t *testing.T, p *testbin.Proc, url string) {
	t.Helper()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitMQTT(t, url)
}
