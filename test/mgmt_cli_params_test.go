package test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/conf"
)

// TestMgmtCLIShovelsAndBridges: tridentctl declares, lists, restarts and
// deletes shovels and MQTT bridges through the API (as rabbitmqctl
// set_parameter shovel / restart_shovel / clear_parameter), and a user
// without the policymaker tag is refused every change.
func TestMgmtCLIShovelsAndBridges(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	ctl := func(want int, args ...string) string {
		t.Helper()
		return runCtl(t, base, "guest", "guest", want, args...)
	}
	for _, q := range []string{"cli-src", "cli-dst"} {
		api.expect(http.StatusCreated, "PUT", "/api/queues/%2F/"+q, map[string]any{"durable": true})
	}

	// A shovel: declared, it moves a message; listed with its state.
	ctl(0, "declare", "shovel", "s1", "--value", `{"src-uri":"amqp://","src-queue":"cli-src","dest-uri":"amqp://","dest-queue":"cli-dst"}`)
	api.expect(http.StatusOK, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{
		"routing_key": "cli-src", "payload": "moved", "payload_encoding": "string", "properties": map[string]any{}})
	eventually(t, 20*time.Second, "the shovel to move the message", func() bool {
		q := api.object("/api/queues/%2F/cli-dst")
		n, _ := q["messages"].(float64)
		return n == 1
	})
	eventually(t, 20*time.Second, "list shovels to show s1 running", func() bool {
		out := ctl(0, "list", "shovels")
		return strings.Contains(out, "s1") && strings.Contains(out, "running")
	})
	ctl(0, "restart", "shovel", "s1")

	// An MQTT bridge from flags: its definition holds them, and it runs.
	ctl(0, "declare", "mqtt-bridge", "b1", "--address", b.mqttAddr(), "--topic", `cli/# out 1 "" copy/`,
		"--remote-username", "guest", "--remote-password", "guest", "--remote-clientid", "cli-bridge")
	def := api.object("/api/parameters/mqtt-bridge/%2F/b1")
	v, _ := def["value"].(map[string]any)
	if v["address"] != b.mqttAddr() || v["remote_clientid"] != "cli-bridge" || v["remote_password"] == "guest" {
		t.Fatalf("definition from the CLI: %v (the password must be redacted)", def)
	}
	waitBridge(t, api, "b1", "running", 20*time.Second)
	if out := ctl(0, "list", "mqtt-bridges", "--format", "json"); !strings.Contains(out, `"b1"`) || !strings.Contains(out, `"running"`) {
		t.Fatalf("list mqtt-bridges: %s", out)
	}
	ctl(0, "restart", "mqtt-bridge", "b1")

	// Usage errors: exit 2, nothing declared.
	ctl(2, "declare", "mqtt-bridge", "b2", "--address", b.mqttAddr())
	ctl(2, "declare", "shovel", "s2")
	ctl(2, "declare", "shovel", "s2", "--value", "[1]")
	if code, _ := api.do("GET", "/api/parameters/mqtt-bridge/%2F/b2", nil); code != http.StatusNotFound {
		t.Fatalf("b2 after a usage error: %d, want 404", code)
	}

	// A management user may do none of it.
	api.expect(http.StatusCreated, "PUT", "/api/users/op", map[string]any{"password": "pw", "tags": "management"})
	api.expect(http.StatusCreated, "PUT", "/api/permissions/%2F/op", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	for _, args := range [][]string{
		{"declare", "shovel", "s3", "--value", `{"src-uri":"amqp://","src-queue":"cli-src","dest-uri":"amqp://","dest-queue":"cli-dst"}`},
		{"declare", "mqtt-bridge", "b3", "--address", b.mqttAddr(), "--topic", "x/# out 1"},
		{"restart", "shovel", "s1"}, {"restart", "mqtt-bridge", "b1"},
		{"delete", "shovel", "s1"}, {"delete", "mqtt-bridge", "b1"},
	} {
		if out := runCtl(t, base, "op", "pw", 1, args...); !strings.Contains(out, "401") && !strings.Contains(out, "403") &&
			!strings.Contains(strings.ToLower(out), "refused") && !strings.Contains(strings.ToLower(out), "not authorised") {
			t.Fatalf("tridentctl %v as a management user: %s, want a refusal", args, out)
		}
	}
	if code, _ := api.do("GET", "/api/parameters/shovel/%2F/s3", nil); code != http.StatusNotFound {
		t.Fatalf("s3 declared by a management user: %d", code)
	}

	ctl(0, "delete", "mqtt-bridge", "b1")
	ctl(0, "delete", "shovel", "s1")
	for _, p := range []string{"/api/parameters/mqtt-bridge/%2F/b1", "/api/parameters/shovel/%2F/s1"} {
		if code, _ := api.do("GET", p, nil); code != http.StatusNotFound {
			t.Fatalf("%s after delete: %d, want 404", p, code)
		}
	}
	if out := runCtl(t, base, "guest", "guest", 1, "delete", "shovel", "s1"); !strings.Contains(out, "not found") {
		t.Fatalf("deleting a missing shovel: %s", out)
	}
}
