package test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/trident-broker/trident/conf"
)

// Issue 38's MQTT findings: F5 (a session is its user's), F12 (a cap on
// one client's subscriptions) and item 3 (CONNECT is bounded before the
// client is authenticated).

// secUsers creates users with every permission on vhost "/".
func secUsers(t *testing.T, b *broker, names ...string) {
	t.Helper()
	us := b.n.Users()
	for _, u := range names {
		if err := us.PutUser(u, "pw", nil); err != nil {
			t.Fatal(err)
		}
		if err := us.SetPermissions(u, "/", ".*", ".*", ".*"); err != nil {
			t.Fatal(err)
		}
	}
}

// connect5 is the CONNECT of an MQTT 5 client of user with a session that
// outlives its connections (clean start off, an hour's expiry).
func connect5(user, id string) *paho.Connect {
	return &paho.Connect{ClientID: id, CleanStart: false, Username: user, UsernameFlag: true,
		Password: []byte("pw"), PasswordFlag: true,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(3600)}}
}

// dial3Present connects an MQTT 3.1.1 client of user (clean session off)
// and returns it with the CONNACK's session present flag.
func dial3Present(t *testing.T, addr, user, id string) (*client3, bool, error) {
	t.Helper()
	c := &client3{msgs: make(chan msg3, 100)}
	o := mqtt3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(false).
		SetUsername(user).SetPassword("pw").SetAutoReconnect(false).SetConnectRetry(false).
		SetProtocolVersion(4).SetConnectTimeout(5 * time.Second).
		SetDefaultPublishHandler(func(_ mqtt3.Client, m mqtt3.Message) {
			c.msgs <- msg3{topic: m.Topic(), payload: string(m.Payload()), qos: m.Qos()}
		})
	c.Client = mqtt3.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, false, errors.New("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return nil, false, err
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c, tok.(*mqtt3.ConnectToken).SessionPresent(), nil
}

// TestSecurityF5SessionOwner: another user with the client id of a
// user's persistent session never gets that session (F5).
func TestSecurityF5SessionOwner(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	secUsers(t, b, "u1", "u2")
	pub, _ := dial5(t, addr, &paho.Connect{ClientID: "f5-pub", CleanStart: true})
	send := func(topic, payload string) {
		pub.publish(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)})
	}

	// u1's persistent session, with a message queued while it is away.
	u1, _ := dial5(t, addr, connect5("u1", "dev-1"))
	u1.subscribe(t, paho.SubscribeOptions{Topic: "u1/#", QoS: 1})
	_ = u1.Disconnect(&paho.Disconnect{})
	send("u1/a", "queued-1")

	// u1 resumes it: session present, the queued message.
	u1, ack := dial5(t, addr, connect5("u1", "dev-1"))
	if !ack.SessionPresent {
		t.Fatal("u1 resuming its own session: session present = 0")
	}
	if m := u1.receive(t); string(m.Payload) != "queued-1" {
		t.Fatalf("u1 resumed and got %q, want queued-1", m.Payload)
	}

	// While u1 is connected, u2 with its client id is refused (0x87 in
	// 5, return code 5 in 3.1.1) and u1 stays connected.
	c, ack, err := tryDial5(addr, connect5("u2", "dev-1"))
	if err == nil {
		_ = c.Disconnect(&paho.Disconnect{})
		t.Fatalf("u2 took u1's connected session (session present %v)", ack.SessionPresent)
	}
	if ack == nil || ack.ReasonCode != 0x87 {
		t.Fatalf("u2 (MQTT 5) with u1's client id: %v, CONNACK %+v, want 0x87 Not authorized", err, ack)
	}
	if _, _, err := dial3Present(t, addr, "u2", "dev-1"); err == nil || !strings.Contains(strings.ToLower(err.Error()), "not authorized") {
		t.Fatalf("u2 (3.1.1) with u1's client id: %v, want not authorized", err)
	}
	select {
	case d := <-u1.disc:
		t.Fatalf("u1 was disconnected (reason %#x) by u2's CONNECT", d.ReasonCode)
	default:
	}
	send("u1/b", "live-1")
	if m := u1.receive(t); string(m.Payload) != "live-1" {
		t.Fatalf("u1 after u2's refusal got %q, want live-1", m.Payload)
	}

	// u1 away with a queued message: u2 gets a fresh session, nothing of
	// u1's, neither queued nor live.
	_ = u1.Disconnect(&paho.Disconnect{})
	send("u1/c", "queued-2")
	// u1 is away once the broker has read its DISCONNECT (asynchronously:
	// until then u1's session still has its owner connected).
	var u2 *client3
	var present bool
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		u2, present, err = dial3Present(t, addr, "u2", "dev-1")
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("u2 with the client id of u1's session, u1 away: %v", err)
	}
	if present {
		t.Fatal("u2 got session present = 1 for u1's session")
	}
	send("u1/d", "live-2")
	u2.none(t, 500*time.Millisecond)
	u2.Disconnect(50)

	// u1's session was discarded with what was queued for it. u2's
	// DISCONNECT may still be in hand on the broker, and while u2 is
	// connected u1 is refused (0x87): retry until u2 is gone.
	var c1 *client5
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		c1, ack, err = tryDial5(addr, connect5("u1", "dev-1"))
		if err == nil || ack == nil || ack.ReasonCode != 0x87 || time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("u1 reconnecting after u2 left: %v, CONNACK %+v", err, ack)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() { _ = c1.Disconnect(&paho.Disconnect{}) })
	u1 = c1
	if ack.SessionPresent {
		t.Fatal("u1's session survived u2's fresh one")
	}
	u1.none(t, 300*time.Millisecond)
}

// TestSecurityF5SessionOwnerAfterRestart: the owner is stored with the
// session, so a restart does not let another user resume it.
func TestSecurityF5SessionOwnerAfterRestart(t *testing.T) {
	b := startMQTTBroker(t)
	secUsers(t, b, "u1", "u2")
	u1, _ := dial5(t, b.mqttAddr(), connect5("u1", "dev-r"))
	u1.subscribe(t, paho.SubscribeOptions{Topic: "u1/#", QoS: 1})
	_ = u1.Disconnect(&paho.Disconnect{})
	b.restart()
	addr := b.mqttAddr()

	u1, ack := dial5(t, addr, connect5("u1", "dev-r"))
	if !ack.SessionPresent {
		t.Fatal("u1's session lost in the restart")
	}
	if c, ack, err := tryDial5(addr, connect5("u2", "dev-r")); err == nil {
		_ = c.Disconnect(&paho.Disconnect{})
		t.Fatalf("after a restart u2 took u1's connected session (present %v)", ack.SessionPresent)
	} else if ack == nil || ack.ReasonCode != 0x87 {
		t.Fatalf("u2 after restart: %v, %+v, want 0x87", err, ack)
	}
	_ = u1.Disconnect(&paho.Disconnect{})
	b.restart()
	if _, ack := dial5(t, b.mqttAddr(), connect5("u2", "dev-r")); ack.SessionPresent {
		t.Fatal("after a restart u2 resumed u1's session")
	}
}

// TestSecurityF5ResubscribeRechecked: a resumed session's subscriptions
// are checked against the user's permissions of now, before anything is
// delivered (F5).
func TestSecurityF5ResubscribeRechecked(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	secUsers(t, b, "u1")
	us := b.n.Users()
	if err := us.SetTopicPermissions("u1", "/", "amq.topic", ".*", `^(open|secret)\.`); err != nil {
		t.Fatal(err)
	}
	u1, _ := dial5(t, addr, connect5("u1", "dev-2"))
	u1.subscribe(t, paho.SubscribeOptions{Topic: "secret/#", QoS: 1}, paho.SubscribeOptions{Topic: "open/#", QoS: 1})
	_ = u1.Disconnect(&paho.Disconnect{})

	// Read on secret.* revoked while u1 is away; a message on it queued,
	// and one on open/ (still allowed), which must survive the resume.
	if err := us.SetTopicPermissions("u1", "/", "amq.topic", ".*", `^open\.`); err != nil {
		t.Fatal(err)
	}
	pub, _ := dial5(t, addr, &paho.Connect{ClientID: "f5r-pub", CleanStart: true})
	pub.publish(t, &paho.Publish{Topic: "secret/queued", QoS: 1, Payload: []byte("queued")})
	pub.publish(t, &paho.Publish{Topic: "open/queued", QoS: 1, Payload: []byte("open")})

	u1, ack := dial5(t, addr, connect5("u1", "dev-2"))
	if !ack.SessionPresent {
		t.Fatal("session not resumed")
	}
	if m := u1.receive(t); m.Topic != "open/queued" {
		t.Fatalf("after the revocation u1's first message is %s %q, want open/queued", m.Topic, m.Payload)
	}
	pub.publish(t, &paho.Publish{Topic: "secret/live", QoS: 1, Payload: []byte("live")})
	pub.publish(t, &paho.Publish{Topic: "open/live", QoS: 1, Payload: []byte("open")})
	if m := u1.receive(t); m.Topic != "open/live" {
		t.Fatalf("after the revocation u1 got %s %q", m.Topic, m.Payload)
	}
	u1.none(t, 300*time.Millisecond)
	_ = u1.Disconnect(&paho.Disconnect{})

	// The removal is stored: resumed again, the subscription stays gone.
	u1, _ = dial5(t, addr, connect5("u1", "dev-2"))
	pub.publish(t, &paho.Publish{Topic: "secret/later", QoS: 1, Payload: []byte("later")})
	pub.publish(t, &paho.Publish{Topic: "open/later", QoS: 1, Payload: []byte("open")})
	if m := u1.receive(t); m.Topic != "open/later" {
		t.Fatalf("second resume: u1 got %s %q", m.Topic, m.Payload)
	}
	u1.none(t, 300*time.Millisecond)
}

// TestSecurityF12SubscriptionCap: mqtt.max_subscriptions_per_client (10
// here) refuses each filter past it: 0x97 Quota exceeded in 5, 0x80 in
// 3.1.1; re-subscribing does not count (F12).
func TestSecurityF12SubscriptionCap(t *testing.T) {
	b := startMQTTBroker(t, func(c *conf.Config) { c.MQTT.MaxSubscriptionsPerClient = 10 })
	addr := b.mqttAddr()

	c5, _ := dial5(t, addr, &paho.Connect{ClientID: "cap-5", CleanStart: true})
	var ten []paho.SubscribeOptions
	for i := range 10 {
		ten = append(ten, paho.SubscribeOptions{Topic: fmt.Sprintf("cap/%d", i), QoS: 1})
	}
	sa := c5.subscribe(t, ten...)
	for i, rc := range sa.Reasons {
		if rc != 1 {
			t.Fatalf("filter %d of 10: reason %#x, want 1", i, rc)
		}
	}
	// Again the first, the eleventh, and again the second.
	sa, _ = c5.Subscribe(ctxTimeout(t, 5*time.Second), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: "cap/0", QoS: 1}, {Topic: "cap/10", QoS: 1}, {Topic: "cap/1", QoS: 0}}})
	if sa == nil {
		t.Fatal("no SUBACK")
	}
	if want := []byte{1, 0x97, 0}; !bytes.Equal(sa.Reasons, want) {
		t.Fatalf("SUBACK past the cap: %#x, want %#x", sa.Reasons, want)
	}
	pub, _ := dial5(t, addr, &paho.Connect{ClientID: "cap-pub", CleanStart: true})
	pub.publish(t, &paho.Publish{Topic: "cap/10", QoS: 1, Payload: []byte("over")})
	pub.publish(t, &paho.Publish{Topic: "cap/9", QoS: 1, Payload: []byte("kept")})
	if m := c5.receive(t); m.Topic != "cap/9" {
		t.Fatalf("got %s %q, want cap/9", m.Topic, m.Payload)
	}
	// An unsubscribe makes room.
	if _, err := c5.Unsubscribe(ctxTimeout(t, 5*time.Second), &paho.Unsubscribe{Topics: []string{"cap/3"}}); err != nil {
		t.Fatal(err)
	}
	if sa = c5.subscribe(t, paho.SubscribeOptions{Topic: "cap/10", QoS: 1}); sa.Reasons[0] != 1 {
		t.Fatalf("after an unsubscribe: %#x", sa.Reasons)
	}

	c3 := dial3(t, "tcp://"+addr, "cap-3", true)
	filters := map[string]byte{}
	for i := range 11 {
		filters[fmt.Sprintf("cap3/%d", i)] = 1
	}
	tok := c3.SubscribeMultiple(filters, nil)
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe 11: %v", tok.Error())
	}
	granted, failed := 0, 0
	for _, rc := range tok.(*mqtt3.SubscribeToken).Result() {
		switch rc {
		case 1:
			granted++
		case 0x80:
			failed++
		}
	}
	if granted != 10 || failed != 1 {
		t.Fatalf("3.1.1: %d granted, %d failed of 11, want 10 and 1", granted, failed)
	}
}

// TestSecurityMQTTPreAuthBound: a CONNECT larger than
// mqtt.max_packet_size_unauthenticated (16 KiB) is refused from its fixed
// header, before its body is read or a buffer made for it (issue 38,
// item 3), over TCP and WebSocket.
func TestSecurityMQTTPreAuthBound(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	// The start of an MQTT 5 and of a 3.1.1 CONNECT's body: protocol
	// name, level, flags (clean start), keep-alive.
	v5 := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 60}
	v4 := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60}
	header := func(remaining int, body []byte) []byte {
		b := []byte{0x10}
		for {
			d := byte(remaining % 128)
			remaining /= 128
			if remaining > 0 {
				d |= 0x80
			}
			b = append(b, d)
			if remaining == 0 {
				return append(b, body...)
			}
		}
	}
	// answer reads what the broker sends until it closes.
	answer := func(t *testing.T, nc net.Conn) ([]byte, bool) {
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(nc)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return got, false
		}
		return got, true
	}
	connack95 := func(got []byte) bool {
		return len(got) >= 4 && got[0] == 0x20 && got[3] == 0x95
	}

	t.Run("MQTT 5, 100 MB announced", func(t *testing.T) {
		for i := range 4 {
			nc := dialT(t, addr)
			if _, err := nc.Write(header(100_000_000, v5)); err != nil {
				t.Fatal(err)
			}
			if got, closed := answer(t, nc); !closed || !connack95(got) {
				t.Fatalf("conn %d: got %x, closed %v; want CONNACK 0x95 and close", i, got, closed)
			}
		}
	})
	t.Run("MQTT 3.1.1, 512 KiB announced", func(t *testing.T) {
		nc := dialT(t, addr)
		if _, err := nc.Write(header(512<<10, v4)); err != nil {
			t.Fatal(err)
		}
		if got, closed := answer(t, nc); !closed || len(got) != 0 {
			t.Fatalf("got %x, closed %v; want a close without reading the body", got, closed)
		}
	})
	t.Run("Web-MQTT, 512 KiB announced", func(t *testing.T) {
		nc := dialWS(t, b.n.MQTTWSAddr().String(), "mqtt")
		if _, err := nc.Write(header(512<<10, v5)); err != nil {
			t.Fatal(err)
		}
		if got, _ := answer(t, nc); !connack95(got) {
			t.Fatalf("got %x; want CONNACK 0x95", got)
		}
	})
	t.Run("many connections, heap", func(t *testing.T) {
		// Each announces just under 1 MiB: a reader that takes the
		// header's word makes a buffer of that size per connection.
		const n = 32
		heap := func() uint64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		before := heap()
		conns := make([]net.Conn, n)
		for i := range conns {
			conns[i] = dialT(t, addr)
			if _, err := conns[i].Write(header(1_000_000, v4)); err != nil {
				t.Fatal(err)
			}
		}
		// All wait at once, so that the heap is measured while the
		// broker still holds whatever it took for connections it did
		// not close.
		var open atomic.Int32
		var wg sync.WaitGroup
		for _, nc := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, closed := answer(t, nc); !closed {
					open.Add(1)
				}
			}()
		}
		wg.Wait()
		grew := int64(heap()) - int64(before)
		if o := open.Load(); o > 0 {
			t.Errorf("%d of %d connections with an oversized CONNECT still open", o, n)
		}
		if grew > 8<<20 {
			t.Errorf("heap grew by %d bytes for %d unauthenticated CONNECTs", grew, n)
		}
	})
	// A CONNECT within the bound still logs in.
	c, _ := dial5(t, addr, &paho.Connect{ClientID: "preauth-ok", CleanStart: true})
	_ = c.Disconnect(&paho.Disconnect{})
}
