package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// fakeFaults is a FaultInjector; down says the node runs no mux.
type fakeFaults struct {
	blocked []string
	sets    int
	down    bool
}

func (f *fakeFaults) SetBlocked(addrs []string) error {
	if f.down {
		return ErrNotClustered
	}
	f.sets++
	f.blocked = addrs
	return nil
}

func (f *fakeFaults) Blocked() []string { return f.blocked }

func newFaultServer(t *testing.T, f FaultInjector) *Server {
	t.Helper()
	st := store.NewMemory()
	b, err := exchange.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	users, err := auth.New(st, auth.Options{DefaultUser: "guest", DefaultPass: "guest"})
	if err != nil {
		t.Fatal(err)
	}
	if err := users.PutUser("mon", "mon", []string{"management", "monitoring", "policymaker"}); err != nil {
		t.Fatal(err)
	}
	s := New(Options{Users: users, Core: b, Node: "trident@a", StatsInterval: time.Hour, FaultInjection: f})
	t.Cleanup(s.Close)
	return s
}

func partitionCall(s *Server, method, user, pass, ctype, body string) (int, string, http.Header) {
	req := httptest.NewRequest(method, "/api/cluster/partition", strings.NewReader(body))
	if body == "" {
		req = httptest.NewRequest(method, "/api/cluster/partition", nil)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.SetBasicAuth(user, pass)
	req.RemoteAddr = "127.0.0.1:1234"
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w.Code, w.Body.String(), w.Header()
}

// TestFaultInjectionAPI: /api/cluster/partition is served only when the
// node has a FaultInjector, to administrators, with JSON bodies; PUT sets
// the blocked addresses (204), GET lists them sorted, and a node without a
// mux answers 503.
func TestFaultInjectionAPI(t *testing.T) {
	off := newFaultServer(t, nil)
	if code, _, _ := partitionCall(off, "GET", "guest", "guest", "", ""); code != http.StatusNotFound {
		t.Fatalf("GET without fault injection: %d, want 404", code)
	}
	if code, _, _ := partitionCall(off, "PUT", "guest", "guest", "application/json", `{"blocked":[]}`); code/100 == 2 {
		t.Fatalf("PUT without fault injection: %d", code)
	}
	f := &fakeFaults{}
	s := newFaultServer(t, f)
	const body = `{"blocked":["127.0.0.1:2","127.0.0.1:1"]}`
	for _, tc := range []struct {
		why, user, pass, ctype, body string
		want                         int
	}{
		{"not an administrator", "mon", "mon", "application/json", body, http.StatusUnauthorized},
		{"a bad password", "guest", "wrong", "application/json", body, http.StatusUnauthorized},
		{"not JSON", "guest", "guest", "text/plain", body, http.StatusUnsupportedMediaType},
		{"not an object", "guest", "guest", "application/json", `["x"]`, http.StatusBadRequest},
		{"not a list of strings", "guest", "guest", "application/json", `{"blocked":[1]}`, http.StatusBadRequest},
	} {
		code, resp, h := partitionCall(s, "PUT", tc.user, tc.pass, tc.ctype, tc.body)
		if code != tc.want || f.sets != 0 {
			t.Errorf("%s: %d %s (set %d times), want %d", tc.why, code, resp, f.sets, tc.want)
		}
		if h.Get("WWW-Authenticate") != "" {
			t.Errorf("%s: a Basic challenge", tc.why)
		}
	}
	if code, resp, _ := partitionCall(s, "GET", "mon", "mon", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET, not an administrator: %d %s", code, resp)
	}
	if code, resp, _ := partitionCall(s, "PUT", "guest", "guest", "application/json", body); code != http.StatusNoContent || f.sets != 1 {
		t.Fatalf("PUT: %d %s", code, resp)
	}
	code, resp, _ := partitionCall(s, "GET", "guest", "guest", "", "")
	var got partitionJSON
	if err := json.Unmarshal([]byte(resp), &got); code != http.StatusOK || err != nil ||
		!slices.Equal(got.Blocked, []string{"127.0.0.1:1", "127.0.0.1:2"}) {
		t.Fatalf("GET: %d %s %v", code, resp, err)
	}
	if code, _, _ := partitionCall(s, "PUT", "guest", "guest", "application/json", `{}`); code != http.StatusNoContent || len(f.blocked) != 0 {
		t.Fatalf("heal: %d, blocked %v", code, f.blocked)
	}
	f.down = true
	if code, resp, _ := partitionCall(s, "PUT", "guest", "guest", "application/json", body); code != http.StatusServiceUnavailable {
		t.Fatalf("not clustered: %d %s", code, resp)
	}
}
