package test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/conf"
)

// mgmtBroker starts a node with the management API and Prometheus on
// loopback, sampling rates every 100ms.
func mgmtBroker(t testing.TB, mutate ...func(*conf.Config)) (*broker, string) {
	t.Helper()
	b := startBroker(t, append([]func(*conf.Config){func(c *conf.Config) {
		c.HTTP.Listen = "127.0.0.1:0"
		c.Prometheus.Listen = "127.0.0.1:0"
		c.HTTP.StatsInterval = 100 * time.Millisecond
	}}, mutate...)...)
	return b, "http://" + b.n.HTTPAddr().String()
}

type apiClient struct {
	t          testing.TB
	base       string
	user, pass string
	token      string // when set: Authorization: Bearer token (OAuth 2)
}

func (a apiClient) as(user, pass string) apiClient {
	a.user, a.pass = user, pass
	return a
}

// do sends a request and returns the status and body. body may be a
// string (sent as is) or any value (sent as JSON).
func (a apiClient) do(method, path string, body any) (int, []byte) {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			a.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	} else if a.user != "" {
		req.SetBasicAuth(a.user, a.pass)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// expect sends a request and fails unless the status is want.
func (a apiClient) expect(want int, method, path string, body any) []byte {
	a.t.Helper()
	got, data := a.do(method, path, body)
	if got != want {
		a.t.Fatalf("%s %s as %s: status %d, want %d; body %s", method, path, a.user, got, want, data)
	}
	return data
}

// getJSON GETs path (expecting 200) and decodes into v.
func (a apiClient) getJSON(path string, v any) {
	a.t.Helper()
	data := a.expect(http.StatusOK, "GET", path, nil)
	if err := json.Unmarshal(data, v); err != nil {
		a.t.Fatalf("GET %s: %v in %s", path, err, data)
	}
}

func (a apiClient) object(path string) map[string]any {
	a.t.Helper()
	var m map[string]any
	a.getJSON(path, &m)
	return m
}

func (a apiClient) list(path string) []map[string]any {
	a.t.Helper()
	var l []map[string]any
	a.getJSON(path, &l)
	return l
}

// hasFields fails unless m has every key.
func hasFields(t testing.TB, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: no field %q in %v", what, k, m)
		}
	}
}

func errorBody(t testing.TB, data []byte) (string, string) {
	t.Helper()
	var e struct {
		Error  string `json:"error"`
		Reason any    `json:"reason"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("error body %s: %v", data, err)
	}
	r, _ := e.Reason.(string)
	return e.Error, r
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

// waitUntil polls cond until it holds or 5 s pass.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timeout waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
