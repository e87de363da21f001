package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReadBody(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		required   []string
		wantOK     bool
		reason     string
	}{
		{"empty is an empty object", "", nil, true, ""},
		{"object", `{"a": 1}`, []string{"a"}, true, ""},
		{"not JSON", `{"a":`, nil, false, "unexpected EOF"},
		{"not an object", `[1]`, nil, false, "not_a_json_object"},
		{"first missing key", `{"b": 1}`, []string{"b", "c", "d"}, false, "[{key_missing,c}]"},
		{"bad JSON before keys", `nope`, []string{"a"}, false, "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			body, ok := readBody(w, httptest.NewRequest("PUT", "/", strings.NewReader(tc.body)), tc.required...)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v (answer %d %s)", ok, tc.wantOK, w.Code, w.Body)
			}
			if ok {
				if body == nil || w.Body.Len() != 0 {
					t.Fatalf("ok with body %v and answer %q", body, w.Body)
				}
				return
			}
			var e struct{ Error, Reason string }
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
				t.Fatal(err)
			}
			if w.Code != http.StatusBadRequest || e.Error != "bad_request" || !strings.Contains(e.Reason, tc.reason) {
				t.Fatalf("answer %d %+v, want 400 bad_request with %q", w.Code, e, tc.reason)
			}
		})
	}
}

// TestWritePreamble: the API's writes answer a bad vhost, a bad body and
// missing keys as before the preamble was shared, in the same order.
func TestWritePreamble(t *testing.T) {
	e := newPolEnv(t)
	if err := e.users.PutUser("mon", "mon", []string{"management", "policymaker"}); err != nil {
		t.Fatal(err)
	}
	bad := `{"durable":`
	for _, tc := range []struct {
		method, path, user, body string
		code                     int
		reason                   string
	}{
		// vhostBody: the vhost first (401 without access, 404 missing), then the body.
		{"PUT", "/api/queues/%2F/q", "guest", bad, 400, "unexpected EOF"},
		{"PUT", "/api/queues/nope/q", "guest", bad, 404, "Not Found"},
		{"PUT", "/api/queues/%2F/q", "mon", bad, 401, "User not authorised to access virtual host"},
		{"PUT", "/api/exchanges/%2F/x", "guest", `[1]`, 400, "not_a_json_object"},
		{"PUT", "/api/exchanges/nope/x", "guest", bad, 404, "Not Found"},
		{"PUT", "/api/exchanges/%2F/x", "mon", bad, 401, "User not authorised to access virtual host"},
		{"PUT", "/api/policies/%2F/p", "guest", bad, 400, "unexpected EOF"},
		{"PUT", "/api/policies/nope/p", "guest", bad, 404, "Not Found"},
		{"PUT", "/api/policies/%2F/p", "mon", bad, 401, "User not authorised to access virtual host"},
		// grantBody: the body, then user and vhost, then the keys in order.
		{"PUT", "/api/permissions/nope/guest", "guest", bad, 400, "unexpected EOF"},
		{"PUT", "/api/permissions/nope/guest", "guest", `{}`, 400, "vhost_or_user_not_found"},
		{"PUT", "/api/permissions/%2F/nobody", "guest", `{}`, 400, "vhost_or_user_not_found"},
		{"PUT", "/api/permissions/%2F/mon", "guest", `{"configure":".*"}`, 400, "[{key_missing,write}]"},
		{"PUT", "/api/permissions/%2F/mon", "guest", `{"configure":".*","write":".*","read":".*"}`, 201, ""},
		{"PUT", "/api/topic-permissions/%2F/nobody", "guest", `{}`, 400, "vhost_or_user_not_found"},
		{"PUT", "/api/topic-permissions/%2F/mon", "guest", `{"write":".*"}`, 400, "[{key_missing,exchange}]"},
		// readBody with required keys: the first one missing.
		{"POST", "/api/exchanges/%2F/amq.direct/publish", "guest", `{"routing_key":"k"}`, 400, "[{key_missing,properties}]"},
		{"POST", "/api/queues/%2F/q/get", "guest", `{"encoding":"auto"}`, 400, "[{key_missing,ackmode}]"},
		// the rest decode through readBody alone.
		{"PUT", "/api/vhosts/v2", "guest", bad, 400, "unexpected EOF"},
		{"PUT", "/api/users/u2", "guest", bad, 400, "unexpected EOF"},
		{"PUT", "/api/users/u2", "guest", `{}`, 400, "tags_not_present"},
	} {
		code, body := e.do(t, tc.method, tc.path, tc.user, tc.body)
		if code != tc.code || !strings.Contains(body, tc.reason) {
			t.Errorf("%s %s as %s with %s: %d %s, want %d with %q", tc.method, tc.path, tc.user, tc.body, code, body, tc.code, tc.reason)
		}
	}
}
