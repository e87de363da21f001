package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// newBenchServer is an API over a core with n queues in vhost "/".
func newBenchServer(tb testing.TB, n int) *Server {
	tb.Helper()
	st := store.NewMemory()
	b, err := exchange.New(st, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.EnsureVHost("/"); err != nil {
		tb.Fatal(err)
	}
	users, err := auth.New(st, auth.Options{DefaultUser: "guest", DefaultPass: "guest"})
	if err != nil {
		tb.Fatal(err)
	}
	v, _ := b.VHost("/")
	for i := 0; i < n; i++ {
		if _, err := v.DeclareQueue(fmt.Sprintf("queue-%06d", i), exchange.QueueOpts{}); err != nil {
			tb.Fatal(err)
		}
	}
	s := New(Options{Users: users, Core: b, StatsInterval: time.Hour})
	tb.Cleanup(s.Close)
	return s
}

func serve(tb testing.TB, s *Server, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	req.SetBasicAuth("guest", "guest")
	req.RemoteAddr = "127.0.0.1:1234"
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		tb.Fatalf("%s: %d %s", path, w.Code, w.Body.String())
	}
	return w
}

// BenchmarkListQueuesPaged100k is the UI's queue page over 100,000
// queues: one page of 100, sorted by name, and filtered.
func BenchmarkListQueuesPaged100k(b *testing.B) {
	s := newBenchServer(b, 100_000)
	for _, c := range []struct{ name, path string }{
		{"page", "/api/queues?page=500&page_size=100"},
		{"filter", "/api/queues/%2F?page=1&page_size=100&name=queue-09"},
		{"sort-messages", "/api/queues?page=1&page_size=100&sort=messages&sort_reverse=true"},
		{"overview", "/api/overview"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				serve(b, s, c.path)
			}
		})
	}
}

func TestListQueuesPagedLarge(t *testing.T) {
	s := newBenchServer(t, 2000)
	w := serve(t, s, "/api/queues?page=3&page_size=500")
	if body := w.Body.String(); !strings.Contains(body, `"name":"queue-001000"`) || !strings.Contains(body, `"total_count":2000`) {
		t.Fatalf("page 3: %.300s", body)
	}
	s.rates.sample(s) // sampling many queues works
}
