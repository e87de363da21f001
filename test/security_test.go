package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"github.com/eclipse/paho.golang/paho"
	"github.com/go-stomp/stomp/v3"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/cmd/trident/node"
	"github.com/trident-broker/trident/conf"
)

// dataContains reports whether a file under dir contains needle.
func dataContains(t *testing.T, dir string, needle []byte) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, needle) {
			found = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func writeKey(t *testing.T, name string, b byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, bytes.Repeat([]byte{b}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// publishPersistent publishes body persistently to durable queue q, confirmed.
func publishPersistent(t *testing.T, url, q string, body []byte) {
	t.Helper()
	c := dial(t, url)
	ch := newChannel(t, c)
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("not confirmed: %v", err)
	}
	_ = c.Close()
}

func getBody(t *testing.T, url, q string) []byte {
	t.Helper()
	c := dial(t, url)
	ch := newChannel(t, c)
	d, ok, err := ch.Get(q, true)
	if err != nil || !ok {
		t.Fatalf("get %s: ok=%v err=%v", q, ok, err)
	}
	_ = c.Close()
	return d.Body
}

func TestEncryptionAtRest(t *testing.T) {
	canary := []byte("trident-canary-body-7d3e91c0a5")

	t.Run("off: the body is on disk", func(t *testing.T) {
		b := startBroker(t)
		publishPersistent(t, b.URL, "q", canary)
		b.stop()
		if !dataContains(t, b.cfg.DataDir, canary) {
			t.Fatal("plain text body not found on disk without encryption (test is blind)")
		}
	})

	key := writeKey(t, "key", 1)
	b := startBroker(t, func(c *conf.Config) { c.Encryption.KeyFile = key })
	publishPersistent(t, b.URL, "q", canary)
	publishPersistent(t, b.URL, "q", canary)
	b.stop()
	if dataContains(t, b.cfg.DataDir, canary) {
		t.Fatal("plain text body found on disk with encryption on")
	}
	b.start()
	if got := getBody(t, b.URL, "q"); !bytes.Equal(got, canary) {
		t.Fatalf("recovered %q", got)
	}
	b.stop()

	// A wrong key, or none, is refused with a clear error.
	for name, kf := range map[string]string{"wrong key": writeKey(t, "wrong", 2), "no key": ""} {
		cfg := b.cfg
		cfg.Encryption.KeyFile = kf
		n, err := node.Start(cfg, nil)
		if err == nil {
			_ = n.Close(context.Background())
			t.Fatalf("%s: started", name)
		}
		if !strings.Contains(err.Error(), "encryption key does not match") {
			t.Fatalf("%s: error %q does not say the key is wrong", name, err)
		}
	}

	// Rotation (trident --rotate-encryption-key NEW): the new key opens it.
	newKey := writeKey(t, "new", 3)
	cfg := b.cfg
	cfg.Encryption.RotateTo = newKey
	if err := node.RotateEncryptionKey(cfg, nil); err != nil {
		t.Fatal(err)
	}
	b.cfg.Encryption.KeyFile = newKey
	b.start()
	if got := getBody(t, b.URL, "q"); !bytes.Equal(got, canary) {
		t.Fatalf("after rotation recovered %q", got)
	}
	b.stop()
	cfg.Encryption.RotateTo = ""
	if _, err := node.Start(cfg, nil); err == nil || !strings.Contains(err.Error(), "encryption key does not match") {
		t.Fatalf("old key after rotation: %v", err)
	}
}

func readAudit(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// findAudit returns the first record with msg event whose attributes
// include want.
func findAudit(recs []map[string]any, event string, want map[string]any) map[string]any {
next:
	for _, r := range recs {
		if r["msg"] != event {
			continue
		}
		for k, v := range want {
			if r[k] != v {
				continue next
			}
		}
		return r
	}
	return nil
}

func TestAuditLog(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.json")
	b, base := mgmtBroker(t, func(c *conf.Config) { c.Audit.File = file })
	admin := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	admin.expect(201, "PUT", "/api/users/carol", map[string]any{"password": "c", "tags": ""})
	admin.expect(201, "PUT", "/api/permissions/%2F/carol", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	admin.expect(201, "PUT", "/api/topic-permissions/%2F/carol", map[string]any{"exchange": "amq.topic", "write": ".*", "read": ".*"})
	admin.expect(201, "PUT", "/api/queues/%2F/aq", map[string]any{"durable": true})
	admin.expect(204, "DELETE", "/api/queues/%2F/aq", nil)
	admin.expect(204, "DELETE", "/api/permissions/%2F/carol", nil)
	// The password is right (an audit success) though the vhost is no
	// longer open to carol.
	if c, err := amqp.Dial("amqp://carol:c@" + b.Addr + "/"); err == nil {
		_ = c.Close()
	}
	if _, err := amqp.Dial("amqp://carol:wrong@" + b.Addr + "/"); err == nil {
		t.Fatal("wrong password accepted")
	}
	var recs []map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs = readAudit(t, file)
		if findAudit(recs, "authentication.failure", map[string]any{"user": "carol"}) != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, w := range []struct {
		event string
		attrs map[string]any
	}{
		{"user.put", map[string]any{"user": "guest", "path": "/api/users/carol", "method": "PUT"}},
		{"permission.set", map[string]any{"user": "guest", "path": "/api/permissions/%2F/carol"}},
		{"topic_permission.set", map[string]any{"user": "guest", "path": "/api/topic-permissions/%2F/carol"}},
		{"object.created", map[string]any{"user": "guest", "path": "/api/queues/%2F/aq", "status": float64(201)}},
		{"object.deleted", map[string]any{"user": "guest", "path": "/api/queues/%2F/aq"}},
		{"permission.cleared", map[string]any{"user": "guest", "path": "/api/permissions/%2F/carol"}},
		{"authentication.success", map[string]any{"user": "carol"}},
		{"authentication.failure", map[string]any{"user": "carol"}},
	} {
		r := findAudit(recs, w.event, w.attrs)
		if r == nil {
			t.Errorf("no audit record %s %v in:\n%v", w.event, w.attrs, recs)
			continue
		}
		if _, ok := r["time"]; !ok || r["log"] != "audit" {
			t.Errorf("record %v lacks time or log=audit", r)
		}
	}
	if r := findAudit(recs, "authentication.failure", map[string]any{"user": "carol"}); r != nil {
		if remote, _ := r["remote"].(string); !strings.HasPrefix(remote, "127.0.0.1:") {
			t.Errorf("failure record remote %q", remote)
		}
	}
}

// TestAuditLogAMQPObjects: objects created and deleted over AMQP are
// audited with the user who did it.
func TestAuditLogAMQPObjects(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.json")
	b := startBroker(t, func(c *conf.Config) { c.Audit.File = file })
	_, ch := channel(t, b.URL)
	if err := ch.ExchangeDeclare("audit-x", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("audit-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("audit-q", true, false, false, false, nil); err != nil { // redeclare: no record
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("audit-q", false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete("audit-x", false, false); err != nil {
		t.Fatal(err)
	}
	want := []struct{ event, kind, name string }{
		{"object.created", "exchange", "audit-x"},
		{"object.created", "queue", "audit-q"},
		{"object.deleted", "queue", "audit-q"},
		{"object.deleted", "exchange", "audit-x"},
	}
	var recs []map[string]any
	waitFor(t, func() bool {
		recs = readAudit(t, file)
		return findAudit(recs, "object.deleted", map[string]any{"kind": "exchange", "name": "audit-x"}) != nil
	})
	for _, w := range want {
		if findAudit(recs, w.event, map[string]any{"kind": w.kind, "name": w.name, "user": "guest", "protocol": "amqp", "vhost": "/"}) == nil {
			t.Errorf("no %s record for %s %s in %v", w.event, w.kind, w.name, recs)
		}
	}
	n := 0
	for _, r := range recs {
		if r["msg"] == "object.created" && r["name"] == "audit-q" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d object.created records for audit-q, want 1 (a redeclare creates nothing)", n)
	}
}

// TestAuditLogSTOMPAndMQTTQueues: queues that STOMP and MQTT create for
// their subscriptions are audited too, with the protocol and the user.
func TestAuditLogSTOMPAndMQTTQueues(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.json")
	b := startBroker(t, func(c *conf.Config) {
		c.Audit.File = file
		c.STOMP.Listen = "127.0.0.1:0"
		c.MQTT.Listen = "127.0.0.1:0"
	})
	sc := stDial(t, b)
	if _, err := sc.Subscribe("/queue/audit-stomp", stomp.AckAuto); err != nil {
		t.Fatal(err)
	}
	stSync(t, sc)
	mc, _ := dial5(t, b.n.MQTTAddr().String(), &paho.Connect{ClientID: "audit-mqtt", CleanStart: true,
		Username: "guest", UsernameFlag: true, Password: []byte("guest"), PasswordFlag: true})
	mc.subscribe(t, paho.SubscribeOptions{Topic: "audit/#", QoS: 1})
	var recs []map[string]any
	waitFor(t, func() bool {
		recs = readAudit(t, file)
		return findAudit(recs, "object.created", map[string]any{"protocol": "mqtt"}) != nil &&
			findAudit(recs, "object.created", map[string]any{"protocol": "stomp"}) != nil
	})
	if findAudit(recs, "object.created", map[string]any{"protocol": "stomp", "name": "audit-stomp", "user": "guest", "kind": "queue"}) == nil {
		t.Errorf("no STOMP queue record in %v", recs)
	}
	if r := findAudit(recs, "object.created", map[string]any{"protocol": "mqtt", "user": "guest", "kind": "queue"}); r == nil {
		t.Errorf("no MQTT queue record in %v", recs)
	}
}
