package test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// TestOpsCLIDrain: tridentctl drain on a single node closes its clients
// with each protocol's goodbye (AMQP 320, MQTT 5 DISCONNECT 0x8B server
// shutting down, a STOMP ERROR frame) and refuses new connections on
// AMQP, MQTT and STOMP while its HTTP API answers; tridentctl revive
// opens them again. A user who is not an administrator is refused.
func TestOpsCLIDrain(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) {
		c.MQTT.Listen = "127.0.0.1:0"
		c.STOMP.Listen = "127.0.0.1:0"
	})
	ctl := ctlRunner{t: t, bin: tridentctl(t), base: base}
	amqpAddr, mqttAddr, stompAddr := b.n.AMQPAddr().String(), b.mqttAddr(), b.n.STOMPAddr().String()

	conn, err := amqp.Dial("amqp://guest:guest@" + amqpAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	amqpClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	m5, _ := dial5(t, mqttAddr, &paho.Connect{ClientID: "drain5", CleanStart: true, Username: "guest", UsernameFlag: true,
		Password: []byte("guest"), PasswordFlag: true})
	sc, err := net.Dial("tcp", stompAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if _, err := sc.Write([]byte("CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")); err != nil {
		t.Fatal(err)
	}
	sr := bufio.NewReader(sc)
	if line, err := sr.ReadString('\n'); err != nil || line != "CONNECTED\n" {
		t.Fatalf("STOMP CONNECT: %q %v", line, err)
	}
	if _, err := sr.ReadString(0); err != nil {
		t.Fatal(err)
	}

	ctl.run(0, nil, "declare", "user", "drain-mon", "--password", "pw", "--tags", "monitoring")
	mon := ctl
	mon.user = "drain-mon"
	for _, op := range []string{"drain", "revive"} {
		if out := mon.run(1, nil, op); !strings.Contains(out, "401") && !strings.Contains(out, "403") {
			t.Errorf("%s by a monitoring user: %s", op, out)
		}
	}
	if out := ctl.run(0, nil, "drain"); !strings.Contains(out, "maintenance mode") {
		t.Errorf("drain: %q", out)
	}

	select {
	case e := <-amqpClosed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Errorf("AMQP client closed with %v, want 320 CONNECTION_FORCED", e)
		}
	case <-time.After(10 * time.Second):
		t.Error("the AMQP client was not closed")
	}
	select {
	case d := <-m5.disc:
		if d.ReasonCode != 0x8B {
			t.Errorf("MQTT 5 DISCONNECT reason 0x%02X, want 0x8B server shutting down", d.ReasonCode)
		}
	case <-time.After(10 * time.Second):
		t.Error("the MQTT 5 client got no DISCONNECT")
	}
	_ = sc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if frame, err := sr.ReadString(0); err != nil || !strings.HasPrefix(strings.TrimLeft(frame, "\n"), "ERROR\n") {
		t.Errorf("STOMP client: %q %v, want an ERROR frame", frame, err)
	}

	refused := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}
	for _, a := range []string{amqpAddr, mqttAddr, stompAddr} {
		if !refused(a) {
			t.Errorf("drained: %s accepted a connection", a)
		}
	}
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	for _, path := range []string{"/api/overview", "/api/nodes"} {
		if code, body := api.do("GET", path, nil); code != 200 || !strings.Contains(string(body), `"being_drained":true`) {
			t.Errorf("GET %s while drained: %d %s", path, code, body)
		}
	}
	if out := ctl.run(0, nil, "revive"); !strings.Contains(out, "revived") {
		t.Errorf("revive: %q", out)
	}
	for _, a := range []string{amqpAddr, mqttAddr, stompAddr} {
		if refused(a) {
			t.Errorf("revived: %s refused a connection", a)
		}
	}
	c2, err := amqp.Dial("amqp://guest:guest@" + amqpAddr + "/")
	if err != nil {
		t.Fatalf("AMQP after revive: %v", err)
	}
	c2.Close()
}
