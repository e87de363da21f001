package test

import (
	"net/http"
	"strings"
	"testing"
)

// TestOperatorPolicies: /api/operator-policies (RabbitMQ's) caps what a
// queue's own policy asks: the lower max-length wins, the queue shows its
// operator_policy and the merged effective definition; deleting it lifts
// the cap; it survives a restart. Keys that are not limits are refused
// (400), and a user with only the management or monitoring tag is
// refused (401).
func TestOperatorPolicies(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("op.q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	api.expect(201, "PUT", "/api/policies/%2F/user-limit", map[string]any{
		"pattern": "^op\\.", "apply-to": "queues", "definition": map[string]any{"max-length": 10, "message-ttl": 600000}})
	api.expect(201, "PUT", "/api/operator-policies/%2F/cap", map[string]any{
		"pattern": "^op\\.", "definition": map[string]any{"max-length": 3}, "priority": 1})
	api.expect(204, "PUT", "/api/operator-policies/%2F/cap", map[string]any{
		"pattern": "^op\\.", "definition": map[string]any{"max-length": 3}, "priority": 1})

	got := api.object("/api/operator-policies/%2F/cap")
	if got["apply-to"] != "queues" || got["vhost"] != "/" || num(got["priority"]) != 1 {
		t.Fatalf("operator policy %v", got)
	}
	if l := api.list("/api/operator-policies"); len(l) != 1 || l[0]["name"] != "cap" {
		t.Fatalf("operator policies %v", l)
	}
	if l := api.list("/api/operator-policies/%2F"); len(l) != 1 {
		t.Fatalf("operator policies of / %v", l)
	}
	if l := api.list("/api/policies"); len(l) != 1 || l[0]["name"] != "user-limit" {
		t.Fatalf("policies %v (operator policies are apart)", l)
	}
	q := api.object("/api/queues/%2F/op.q")
	eff, _ := q["effective_policy_definition"].(map[string]any)
	if q["policy"] != "user-limit" || q["operator_policy"] != "cap" || num(eff["max-length"]) != 3 || num(eff["message-ttl"]) != 600000 {
		t.Fatalf("queue %v / %v", q["policy"], q["operator_policy"])
	}
	publishBodies(t, ch, "op.q", 0, 10)
	if n := queueCount(t, b.URL, "op.q"); n != 3 {
		t.Fatalf("queue holds %d under the operator policy's max-length 3, want 3", n)
	}

	// Refused: keys that are not limits, exchanges, and users without the tag.
	for _, body := range []map[string]any{
		{"pattern": ".*", "definition": map[string]any{"dead-letter-exchange": "dlx"}},
		{"pattern": ".*", "definition": map[string]any{"max-length": 1}, "apply-to": "exchanges"},
		{"pattern": ".*", "definition": map[string]any{"max-length": -1}},
	} {
		if code, data := api.do("PUT", "/api/operator-policies/%2F/bad", body); code != 400 {
			t.Fatalf("PUT %v: %d %s, want 400", body, code, data)
		}
	}
	for _, tags := range []string{"management", "monitoring"} {
		user := "op-" + tags
		api.expect(201, "PUT", "/api/users/"+user, map[string]any{"password": "pw", "tags": tags})
		api.expect(201, "PUT", "/api/permissions/%2F/"+user, map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
		as := api.as(user, "pw")
		for _, req := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/api/operator-policies", nil},
			{"GET", "/api/operator-policies/%2F/cap", nil},
			{"PUT", "/api/operator-policies/%2F/cap", map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 1000}}},
			{"DELETE", "/api/operator-policies/%2F/cap", nil},
		} {
			code, data := as.do(req.method, req.path, req.body)
			if code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Fatalf("%s %s as a %s user: %d %s", req.method, req.path, tags, code, data)
			}
		}
	}
	if p := api.object("/api/operator-policies/%2F/cap"); !strings.Contains(p["pattern"].(string), "op") {
		t.Fatalf("a refused PUT changed the operator policy: %v", p)
	}

	// It survives a restart.
	b.restart()
	api.base = "http://" + b.n.HTTPAddr().String()
	_, ch = channel(t, b.URL)
	if q := api.object("/api/queues/%2F/op.q"); q["operator_policy"] != "cap" {
		t.Fatalf("after a restart the queue's operator policy is %v", q["operator_policy"])
	}

	// Deleted: the queue's own policy's 10 applies again.
	api.expect(204, "DELETE", "/api/operator-policies/%2F/cap", nil)
	api.expect(404, "DELETE", "/api/operator-policies/%2F/cap", nil)
	api.expect(404, "GET", "/api/operator-policies/%2F/cap", nil)
	if q := api.object("/api/queues/%2F/op.q"); q["operator_policy"] != nil {
		t.Fatalf("operator policy still on the queue: %v", q["operator_policy"])
	}
	publishBodies(t, ch, "op.q", 10, 30)
	if n := queueCount(t, b.URL, "op.q"); n != 10 {
		t.Fatalf("queue holds %d without the operator policy, want its policy's 10", n)
	}
}
