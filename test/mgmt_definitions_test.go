package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// sampleDefs was exported from RabbitMQ 3.10.8 (the anchor) with
// "rabbitmqadmin -P 15673 export": vhost defs-sample holds a topic, a
// fanout with an alternate exchange and a DLX, queues with arguments (one
// quorum queue, which Trident declares classic for now), queue and
// exchange-to-exchange bindings, and user defs-app (password app-secret)
// with permissions there.
const sampleDefs = "testdata/rabbitmq-3.10-definitions.json"

type defsFile struct {
	Users       []map[string]any `json:"users"`
	VHosts      []map[string]any `json:"vhosts"`
	Permissions []map[string]any `json:"permissions"`
	Queues      []map[string]any `json:"queues"`
	Exchanges   []map[string]any `json:"exchanges"`
	Bindings    []map[string]any `json:"bindings"`
	Policies    []map[string]any `json:"policies"`
}

func readDefs(t *testing.T, data []byte) defsFile {
	t.Helper()
	var d defsFile
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// keys returns the identities of items, sorted, for comparing sets.
func keys(items []map[string]any, fields ...string) []string {
	var out []string
	for _, it := range items {
		if it["vhost"] != nil && it["vhost"] != "defs-sample" {
			continue
		}
		if n, _ := it["name"].(string); n != "" && it["vhost"] == nil && len(fields) > 0 && fields[0] == "user" {
			continue
		}
		b, _ := json.Marshal(pick(it, fields...))
		out = append(out, string(b))
	}
	sort.Strings(out)
	return out
}

func pick(m map[string]any, fields ...string) map[string]any {
	out := map[string]any{}
	for _, f := range fields {
		out[f] = m[f]
	}
	return out
}

func TestMgmtDefinitionsRoundTrip(t *testing.T) {
	data, err := os.ReadFile(sampleDefs)
	if err != nil {
		t.Fatal(err)
	}
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	a.expect(204, "POST", "/api/definitions", string(data))

	q := a.object("/api/queues/defs-sample/app.orders")
	args := q["arguments"].(map[string]any)
	if num(args["x-max-length"]) != 1000 || args["x-dead-letter-exchange"] != "app.dlx" || !q["durable"].(bool) {
		t.Errorf("imported queue: %v", q)
	}
	if x := a.object("/api/exchanges/defs-sample/app.fan"); x["arguments"].(map[string]any)["alternate-exchange"] != "app.dlx" {
		t.Errorf("imported exchange: %v", x)
	}
	if p := a.object("/api/permissions/defs-sample/defs-app"); p["configure"] != `^app\.` {
		t.Errorf("imported permission: %v", p)
	}
	// The imported password hash works.
	a.as("defs-app", "app-secret").expect(200, "GET", "/api/whoami", nil)
	// Routing works over imported bindings.
	conn, err := amqp.Dial("amqp://defs-app:app-secret@" + b.Addr + "/defs-sample")
	if err != nil {
		t.Fatalf("imported user over AMQP: %v", err)
	}
	conn.Close()
	a.expect(200, "POST", "/api/exchanges/defs-sample/app.events/publish",
		map[string]any{"properties": map[string]any{}, "routing_key": "order.new", "payload": "o1", "payload_encoding": "string"})
	if q := a.object("/api/queues/defs-sample/app.orders"); num(q["messages"]) != 1 {
		t.Errorf("routing over imported binding: %v messages", q["messages"])
	}

	// The sample (a real 3.10 export) has no policies: one is added, in
	// the shape RabbitMQ exports, and must survive both round trips.
	if len(readDefs(t, data).Policies) != 0 {
		t.Fatal("the sample now has policies: compare them below instead")
	}
	pol := map[string]any{"vhost": "defs-sample", "name": "app-limits", "pattern": `^app\.`, "apply-to": "queues",
		"definition": map[string]any{"max-length": int64(500), "ha-mode": "all"}, "priority": int64(1)}
	a.expect(201, "PUT", "/api/policies/defs-sample/app-limits", pol)

	// Export and compare with the sample.
	exported := a.expect(200, "GET", "/api/definitions", nil)
	in, out := readDefs(t, data), readDefs(t, exported)
	in.Policies = []map[string]any{pol}
	polFields := []string{"vhost", "name", "pattern", "apply-to", "definition", "priority"}
	if ka, kb := keys(jsonRound(t, in.Policies), polFields...), keys(out.Policies, polFields...); !equalStrings(ka, kb) {
		t.Errorf("policies differ:\nwant     %v\nexported %v", ka, kb)
	}
	for _, c := range []struct {
		what   string
		a, b   []map[string]any
		fields []string
	}{
		{"queues", in.Queues, out.Queues, []string{"name", "vhost", "durable", "auto_delete"}},
		{"exchanges", in.Exchanges, out.Exchanges, []string{"name", "vhost", "type", "durable", "auto_delete", "internal", "arguments"}},
		{"bindings", in.Bindings, out.Bindings, []string{"source", "vhost", "destination", "destination_type", "routing_key", "arguments"}},
		{"permissions", in.Permissions, out.Permissions, []string{"user", "vhost", "configure", "write", "read"}},
	} {
		ka, kb := keys(c.a, c.fields...), keys(c.b, c.fields...)
		if len(ka) == 0 || !equalStrings(ka, kb) {
			t.Errorf("%s differ:\nsample   %v\nexported %v", c.what, ka, kb)
		}
	}
	for _, u := range in.Users {
		found := false
		for _, v := range out.Users {
			if v["name"] == u["name"] {
				found = v["password_hash"] == u["password_hash"]
			}
		}
		if !found {
			t.Errorf("user %v not exported with its hash", u["name"])
		}
	}
	// Importing the export again into a fresh node gives the same export.
	_, base2 := mgmtBroker(t)
	a2 := apiClient{t: t, base: base2, user: "guest", pass: "guest"}
	a2.expect(204, "POST", "/api/definitions", string(exported))
	again := readDefs(t, a2.expect(200, "GET", "/api/definitions", nil))
	if !equalStrings(keys(out.Queues, "name", "vhost", "durable", "arguments"), keys(again.Queues, "name", "vhost", "durable", "arguments")) ||
		!equalStrings(keys(out.Bindings, "source", "destination", "routing_key", "arguments"), keys(again.Bindings, "source", "destination", "routing_key", "arguments")) {
		t.Errorf("second round trip differs")
	}
	if ka, kb := keys(out.Policies, polFields...), keys(again.Policies, polFields...); len(ka) != 1 || !equalStrings(ka, kb) {
		t.Errorf("policies after the second round trip: %v, want %v", kb, ka)
	}
	// The imported policy applies on the second node.
	if q := a2.object("/api/queues/defs-sample/app.orders"); q["policy"] != "app-limits" ||
		num(q["effective_policy_definition"].(map[string]any)["max-length"]) != 500 {
		t.Errorf("imported policy not applied: policy %v, effective %v", q["policy"], q["effective_policy_definition"])
	}
	// Per-vhost export.
	vd := a.object("/api/definitions/defs-sample")
	if _, ok := vd["users"]; ok || len(vd["queues"].([]any)) != 3 {
		t.Errorf("vhost export: %v", vd)
	}
	a.expect(400, "POST", "/api/definitions", "{not json")
}

// jsonRound gives items the types a JSON decode gives them.
func jsonRound(t *testing.T, items []map[string]any) []map[string]any {
	t.Helper()
	b, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMgmtDefinitionsAtBoot: --definitions FILE is imported at start.
func TestMgmtDefinitionsAtBoot(t *testing.T) {
	abs, _ := filepath.Abs(sampleDefs)
	_, base := mgmtBroker(t, func(c *conf.Config) { c.Definitions = abs })
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	a.expect(200, "GET", "/api/queues/defs-sample/app.orders", nil)
	if l := a.list("/api/bindings/defs-sample/e/app.events/e/app.fan"); len(l) != 1 {
		t.Errorf("e2e binding from boot definitions: %v", l)
	}
	if c, err := conf.Load([]string{"--definitions", abs}, nil); err != nil || c.Definitions != abs {
		t.Errorf("--definitions flag: %v", err)
	}
}

// TestMgmtDefinitionsAtBootShovel: a shovel among the parameters of the
// definitions file read at start is declared (as the default user) and runs.
func TestMgmtDefinitionsAtBootShovel(t *testing.T) {
	defs := `{"vhosts":[{"name":"/"}],
	"queues":[{"name":"boot-src","vhost":"/","durable":true,"auto_delete":false,"arguments":{}},
	          {"name":"boot-dst","vhost":"/","durable":true,"auto_delete":false,"arguments":{}}],
	"parameters":[{"component":"shovel","vhost":"/","name":"boot-move",
	  "value":{"src-uri":"amqp://","src-queue":"boot-src","dest-uri":"amqp://","dest-queue":"boot-dst"}}]}`
	path := filepath.Join(t.TempDir(), "defs.json")
	if err := os.WriteFile(path, []byte(defs), 0o600); err != nil {
		t.Fatal(err)
	}
	b, base := mgmtBroker(t, func(c *conf.Config) { c.Definitions = path })
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	if l := a.list("/api/parameters/shovel/%2F"); len(l) != 1 {
		t.Fatalf("shovels after boot: %v", l)
	}
	_, ch := channel(t, b.URL)
	publishN(t, ch, "boot-src", 5)
	eventually(t, 10*time.Second, "the boot shovel moving messages", func() bool {
		q, err := ch.QueueDeclarePassive("boot-dst", true, false, false, false, nil)
		return err == nil && q.Messages == 5
	})
}
