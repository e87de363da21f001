package test

import (
	"net/http"
	"testing"
)

// TestShovelRestartAPI: DELETE /api/shovels/vhost/{vhost}/{name}/restart
// (RabbitMQ's) stops a running shovel and starts it afresh (its transfer
// count starts again from zero and it keeps moving messages); a user
// with only the management or monitoring tag is refused, as for the
// shovel's parameters; an unknown shovel is 404.
func TestShovelRestartAPI(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	for _, q := range []string{"rs-src", "rs-dst"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	api.expect(201, "PUT", "/api/parameters/shovel/%2F/rs", map[string]any{"value": map[string]any{
		"src-uri": "amqp:///%2F", "src-queue": "rs-src", "dest-uri": "amqp:///%2F", "dest-queue": "rs-dst"}})
	transferred := func() float64 {
		for _, s := range api.list("/api/shovels/%2F") {
			if s["name"] == "rs" && s["state"] == "running" {
				return num(s["messages_transferred"])
			}
		}
		return -1
	}
	publishBodies(t, ch, "rs-src", 0, 20)
	waitUntil(t, "20 moved", func() bool { return queueCount(t, b.URL, "rs-dst") == 20 && transferred() == 20 })

	// Refused without the policymaker or administrator tag.
	for _, tags := range []string{"management", "monitoring"} {
		user := "rs-" + tags
		api.expect(201, "PUT", "/api/users/"+user, map[string]any{"password": "pw", "tags": tags})
		api.expect(201, "PUT", "/api/permissions/%2F/"+user, map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
		code, body := api.as(user, "pw").do("DELETE", "/api/shovels/vhost/%2F/rs/restart", nil)
		if code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Fatalf("restart as a %s user: %d %s, want 401 or 403", tags, code, body)
		}
	}
	if got := transferred(); got != 20 {
		t.Fatalf("a refused restart restarted the shovel: transferred %v", got)
	}

	api.expect(204, "DELETE", "/api/shovels/vhost/%2F/rs/restart", nil)
	waitUntil(t, "the restarted shovel running afresh", func() bool { return transferred() == 0 })
	publishBodies(t, ch, "rs-src", 20, 25)
	waitUntil(t, "it moves again", func() bool { return queueCount(t, b.URL, "rs-dst") == 25 && transferred() == 5 })

	api.expect(404, "DELETE", "/api/shovels/vhost/%2F/no-such-shovel/restart", nil)
	api.expect(204, "DELETE", "/api/parameters/shovel/%2F/rs", nil)
	api.expect(404, "DELETE", "/api/shovels/vhost/%2F/rs/restart", nil)
}
