package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

type polEnv struct {
	s     *Server
	b     *exchange.Broker
	users *auth.Users
}

func newPolEnv(t *testing.T) *polEnv {
	t.Helper()
	st := store.NewMemory()
	b, err := exchange.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureVHost("/"); err != nil {
		t.Fatal(err)
	}
	users, err := auth.New(st, auth.Options{DefaultUser: "guest", DefaultPass: "guest"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Users: users, Core: b, Node: "trident@a", StatsInterval: time.Hour})
	t.Cleanup(s.Close)
	return &polEnv{s: s, b: b, users: users}
}

func (e *polEnv) do(t *testing.T, method, path, user, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.SetBasicAuth(user, user)
	if user == "guest" {
		req.SetBasicAuth("guest", "guest")
	}
	req.RemoteAddr = "127.0.0.1:1234"
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // guard.go
	}
	w := httptest.NewRecorder()
	e.s.ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

func TestPoliciesAPI(t *testing.T) {
	e := newPolEnv(t)
	v, _ := e.b.VHost("/")
	if _, err := v.DeclareQueue("orders", exchange.QueueOpts{}); err != nil {
		t.Fatal(err)
	}
	if err := v.DeclareExchange("orders.x", "direct", exchange.ExchangeOpts{}); err != nil {
		t.Fatal(err)
	}
	body := `{"pattern":"^orders","definition":{"max-length":2,"ha-mode":"all"},"priority":3,"apply-to":"all"}`
	if code, out := e.do(t, "PUT", "/api/policies/%2F/cap", "guest", body); code != http.StatusCreated {
		t.Fatalf("PUT: %d %s", code, out)
	}
	if code, out := e.do(t, "PUT", "/api/policies/%2F/cap", "guest", body); code != http.StatusNoContent {
		t.Fatalf("PUT again: %d %s", code, out)
	}
	code, out := e.do(t, "GET", "/api/policies/%2F/cap", "guest", "")
	var p map[string]any
	if err := json.Unmarshal([]byte(out), &p); code != http.StatusOK || err != nil {
		t.Fatalf("GET: %d %s", code, out)
	}
	def, _ := p["definition"].(map[string]any)
	if p["vhost"] != "/" || p["name"] != "cap" || p["pattern"] != "^orders" || p["apply-to"] != "all" ||
		p["priority"] != float64(3) || def["max-length"] != float64(2) || def["ha-mode"] != "all" {
		t.Fatalf("GET: %v", p)
	}
	for _, path := range []string{"/api/policies", "/api/policies/%2F"} {
		var l []map[string]any
		code, out := e.do(t, "GET", path, "guest", "")
		if err := json.Unmarshal([]byte(out), &l); code != http.StatusOK || err != nil || len(l) != 1 || l[0]["name"] != "cap" {
			t.Fatalf("GET %s: %d %s", path, code, out)
		}
	}
	var q map[string]any
	_, out = e.do(t, "GET", "/api/queues/%2F/orders", "guest", "")
	_ = json.Unmarshal([]byte(out), &q)
	if epd, _ := q["effective_policy_definition"].(map[string]any); q["policy"] != "cap" || epd["max-length"] != float64(2) {
		t.Fatalf("queue: policy %v, effective %v", q["policy"], q["effective_policy_definition"])
	}
	var x map[string]any
	_, out = e.do(t, "GET", "/api/exchanges/%2F/orders.x", "guest", "")
	_ = json.Unmarshal([]byte(out), &x)
	if x["policy"] != "cap" || x["effective_policy_definition"] == nil {
		t.Fatalf("exchange: %v", out)
	}

	for _, c := range []struct{ body, want string }{
		{`{"pattern":".*","definition":{"max-length":-1}}`, "Validation failed"},
		{`{"pattern":".*","definition":{"overflow":"sideways"}}`, "Validation failed"},
		{`{"pattern":".*","definition":{}}`, "Validation failed"},
		{`{"pattern":".*","definition":{"max-length":1},"apply-to":"streams"}`, "Validation failed"},
		{`{"pattern":"(","definition":{"max-length":1}}`, "Validation failed"},
		{`{"definition":{"max-length":1}}`, "key_missing,pattern"},
		{`{"pattern":".*"}`, "key_missing,definition"},
		{`{"pattern":".*","definition":{"max-length":1},"priority":"x"}`, "priority"},
	} {
		if code, out := e.do(t, "PUT", "/api/policies/%2F/bad", "guest", c.body); code != http.StatusBadRequest || !strings.Contains(out, c.want) {
			t.Errorf("PUT %s: %d %s", c.body, code, out)
		}
	}
	if code, _ := e.do(t, "GET", "/api/policies/%2F/bad", "guest", ""); code != http.StatusNotFound {
		t.Errorf("refused policy exists: %d", code)
	}
	if code, _ := e.do(t, "PUT", "/api/policies/nohost/p", "guest", body); code != http.StatusNotFound {
		t.Errorf("PUT in a missing vhost: %d", code)
	}
	if code, _ := e.do(t, "DELETE", "/api/policies/%2F/cap", "guest", ""); code != http.StatusNoContent {
		t.Errorf("DELETE: %d", code)
	}
	if code, _ := e.do(t, "DELETE", "/api/policies/%2F/cap", "guest", ""); code != http.StatusNotFound {
		t.Errorf("DELETE again: %d", code)
	}
	_, out = e.do(t, "GET", "/api/queues/%2F/orders", "guest", "")
	q = nil
	_ = json.Unmarshal([]byte(out), &q)
	if q["policy"] != nil {
		t.Errorf("queue policy after delete: %v", q["policy"])
	}
}

func TestPoliciesPermissions(t *testing.T) {
	e := newPolEnv(t)
	for name, tags := range map[string][]string{"mgmt": {"management"}, "mon": {"monitoring"}, "pm": {"policymaker"}} {
		if err := e.users.PutUser(name, name, tags); err != nil {
			t.Fatal(err)
		}
		if err := e.users.SetPermissions(name, "/", ".*", ".*", ".*"); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.b.EnsureVHost("private"); err != nil {
		t.Fatal(err)
	}
	body := `{"pattern":".*","definition":{"message-ttl":1000}}`
	if code, _ := e.do(t, "PUT", "/api/policies/private/p", "guest", body); code != http.StatusCreated {
		t.Fatalf("admin PUT: %d", code)
	}
	for _, u := range []string{"mgmt", "mon"} {
		if code, _ := e.do(t, "GET", "/api/policies", u, ""); code != http.StatusUnauthorized {
			t.Errorf("%s lists policies: %d", u, code)
		}
		if code, _ := e.do(t, "PUT", "/api/policies/%2F/p", u, body); code != http.StatusUnauthorized {
			t.Errorf("%s sets a policy: %d", u, code)
		}
	}
	if code, out := e.do(t, "PUT", "/api/policies/%2F/p", "pm", body); code != http.StatusCreated {
		t.Fatalf("policymaker PUT: %d %s", code, out)
	}
	// A policymaker sees only the vhosts it has access to.
	var l []map[string]any
	_, out := e.do(t, "GET", "/api/policies", "pm", "")
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l) != 1 || l[0]["vhost"] != "/" {
		t.Fatalf("policymaker list: %s", out)
	}
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		if code, _ := e.do(t, m, "/api/policies/private/p", "pm", body); code != http.StatusUnauthorized {
			t.Errorf("policymaker %s in a vhost without access: %d", m, code)
		}
	}
	_, out = e.do(t, "GET", "/api/policies", "guest", "")
	l = nil
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l) != 2 {
		t.Fatalf("admin list: %s", out)
	}
}

func TestPoliciesDefinitionsRoundTrip(t *testing.T) {
	a := newPolEnv(t)
	body := `{"pattern":"^app\\.","definition":{"max-length":7,"dead-letter-exchange":"dlx","ha-mode":"all"},"priority":2,"apply-to":"queues"}`
	if code, out := a.do(t, "PUT", "/api/policies/%2F/app", "guest", body); code != http.StatusCreated {
		t.Fatalf("PUT: %d %s", code, out)
	}
	_, defs := a.do(t, "GET", "/api/definitions", "guest", "")
	if !strings.Contains(defs, `"apply-to":"queues"`) {
		t.Fatalf("export lacks the policy: %s", defs)
	}
	_, vdefs := a.do(t, "GET", "/api/definitions/%2F", "guest", "")
	var vd map[string]any
	_ = json.Unmarshal([]byte(vdefs), &vd)
	if ps, _ := vd["policies"].([]any); len(ps) != 1 || ps[0].(map[string]any)["vhost"] != nil {
		t.Fatalf("per-vhost export: %v", vd["policies"])
	}

	b := newPolEnv(t)
	if code, out := b.do(t, "POST", "/api/definitions", "guest", defs); code != http.StatusNoContent {
		t.Fatalf("import: %d %s", code, out)
	}
	v, _ := b.b.VHost("/")
	p, ok := v.Policy("app")
	if !ok || p.Pattern != `^app\.` || p.ApplyTo != "queues" || p.Priority != 2 ||
		p.Definition["max-length"] != int64(7) || p.Definition["ha-mode"] != "all" {
		t.Fatalf("imported policy: %+v %v", p, ok)
	}
	// A per-vhost file puts policies without a vhost into that vhost.
	if err := b.b.EnsureVHost("other"); err != nil {
		t.Fatal(err)
	}
	if code, out := b.do(t, "POST", "/api/definitions/other", "guest", vdefs); code != http.StatusNoContent {
		t.Fatalf("per-vhost import: %d %s", code, out)
	}
	ov, _ := b.b.VHost("other")
	if _, ok := ov.Policy("app"); !ok {
		t.Fatal("per-vhost import lost the policy")
	}
	// An invalid policy in a file is reported.
	bad := `{"policies":[{"vhost":"/","name":"neg","pattern":".*","apply-to":"all","priority":0,"definition":{"max-length":-5}}]}`
	if code, _ := b.do(t, "POST", "/api/definitions", "guest", bad); code != http.StatusBadRequest {
		t.Fatalf("invalid policy imported: %d", code)
	}
}
