package auth

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLoginRateLimit(t *testing.T) {
	opts := defaultOpts()
	opts.FailedLoginLimit = 3
	opts.FailedLoginBackoff = time.Minute
	us := mustNew(t, newMemStore(), opts)
	now := time.Unix(1000, 0)
	us.limit.now = func() time.Time { return now }
	if err := us.PutUser("bob", "secret", nil); err != nil {
		t.Fatal(err)
	}
	other := &net.TCPAddr{IP: net.IPv4(10, 9, 9, 9), Port: 1}
	for i := 0; i < 3; i++ {
		if _, err := us.Authenticate("bob", "wrong", remote); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("failure %d: err = %v, want ErrBadCredentials", i, err)
		}
	}
	// Blocked: even the right password is refused, without a check.
	if _, err := us.Authenticate("bob", "secret", remote); !errors.Is(err, ErrTooManyAttempts) {
		t.Fatalf("blocked: err = %v, want ErrTooManyAttempts", err)
	}
	// Another port of the same IP is the same source.
	if _, err := us.Authenticate("bob", "secret", &net.TCPAddr{IP: remote.IP, Port: 2}); !errors.Is(err, ErrTooManyAttempts) {
		t.Fatalf("same IP other port: err = %v", err)
	}
	// Other addresses are unaffected.
	if _, err := us.Authenticate("bob", "secret", other); err != nil {
		t.Fatalf("other address: %v", err)
	}
	now = now.Add(time.Minute + time.Second)
	if _, err := us.Authenticate("bob", "secret", remote); err != nil {
		t.Fatalf("after back-off: %v", err)
	}
	// Successes take nothing; the allowance refills over time.
	for i := 0; i < 20; i++ {
		if _, err := us.Authenticate("bob", "secret", remote); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = us.Authenticate("bob", "x", remote)
	_, _ = us.Authenticate("bob", "x", remote)
	now = now.Add(time.Minute) // full again
	_, _ = us.Authenticate("bob", "x", remote)
	if _, err := us.Authenticate("bob", "secret", remote); err != nil {
		t.Fatalf("refilled: %v", err)
	}
}

func TestLoginRateLimitIPv6Prefix(t *testing.T) {
	opts := defaultOpts()
	opts.FailedLoginLimit = 1
	us := mustNew(t, newMemStore(), opts)
	a := &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1")}
	b := &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::ffff")}
	c := &net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1")}
	_, _ = us.Authenticate("guest", "x", a)
	if _, err := us.Authenticate("guest", "x", b); !errors.Is(err, ErrTooManyAttempts) {
		t.Fatalf("same /64: %v", err)
	}
	if _, err := us.Authenticate("guest", "x", c); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("other /64: %v", err)
	}
}

func TestLoginRateLimitDisabled(t *testing.T) {
	opts := defaultOpts()
	opts.FailedLoginLimit = -1
	us := mustNew(t, newMemStore(), opts)
	for i := 0; i < 50; i++ {
		_, _ = us.Authenticate("guest", "x", local)
	}
	if _, err := us.Authenticate("guest", "guest", local); err != nil {
		t.Fatal(err)
	}
}

func TestLimiterBounded(t *testing.T) {
	l := newLimiter(2, time.Second)
	for i := 0; i < maxLimiterEntries+10; i++ {
		l.fail(limitKey(&net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i))}))
	}
	if n := len(l.m); n > maxLimiterEntries {
		t.Fatalf("%d entries", n)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) records(t *testing.T) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestAuditAuthentication(t *testing.T) {
	var buf syncBuffer
	opts := defaultOpts()
	opts.FailedLoginLimit = 2
	opts.Audit = slog.New(slog.NewJSONHandler(&buf, nil))
	us := mustNew(t, newMemStore(), opts)
	if _, err := us.Authenticate("guest", "guest", local); err != nil {
		t.Fatal(err)
	}
	_, _ = us.Authenticate("guest", "bad", remote)
	_, _ = us.Authenticate("guest", "bad", remote)
	_, _ = us.Authenticate("guest", "guest", remote)
	recs := buf.records(t)
	want := []string{AuditAuthSuccess, AuditAuthFailure, AuditAuthFailure, AuditAuthBlocked}
	if len(recs) != len(want) {
		t.Fatalf("records %v, want events %v", recs, want)
	}
	for i, r := range recs {
		if r["msg"] != want[i] || r["user"] != "guest" {
			t.Fatalf("record %d = %v, want %s by guest", i, r, want[i])
		}
	}
	if recs[0]["remote"] != local.String() || recs[1]["remote"] != remote.String() {
		t.Fatalf("remote addresses: %v", recs)
	}
	if !strings.Contains(recs[1]["reason"].(string), "bad credentials") {
		t.Fatalf("reason: %v", recs[1])
	}
}

func TestTopicPermissions(t *testing.T) {
	st := newMemStore()
	us := mustNew(t, st, defaultOpts())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(us.PutUser("bob", "pw", nil))
	must(us.SetPermissions("bob", "/", ".*", ".*", ".*"))
	bob, _ := us.Lookup("bob")

	// No record: everything allowed.
	must(us.CheckTopic(bob, "/", Write, "amq.topic", "anything", ""))

	must(us.SetTopicPermissions("bob", "/", "amq.topic", `^sensors\.{username}\.`, `^(sensors|alerts)\.`))
	must(us.SetTopicPermissions("bob", "/", "t2", `^dev\.{client_id}$`, ``))
	tests := []struct {
		perm          Perm
		exchange, key string
		clientID      string
		ok            bool
	}{
		{Write, "amq.topic", "sensors.bob.temp", "", true},
		{Write, "amq.topic", "sensors.alice.temp", "", false},
		{Write, "amq.topic", "sensorsXbob.temp", "", false},
		{Read, "amq.topic", "alerts.#", "", true},
		{Read, "amq.topic", "#", "", false},
		{Write, "other", "x", "", true}, // no record for this exchange
		{Write, "t2", "dev.c1", "c1", true},
		{Write, "t2", "dev.c1", "c2", false},
		{Write, "t2", "dev.c.1", "c.1", true},
		{Write, "t2", "dev.cX1", "c.1", false}, // client id is quoted
		{Read, "t2", "", "", true},             // "" matches only the empty key
		{Read, "t2", "a", "", false},
		{Configure, "amq.topic", "sensors.bob.x", "", false},
	}
	for _, tt := range tests {
		err := us.CheckTopic(bob, "/", tt.perm, tt.exchange, tt.key, tt.clientID)
		if (err == nil) != tt.ok {
			t.Errorf("%s %s %q (client %q): err = %v, want ok=%v", tt.perm, tt.exchange, tt.key, tt.clientID, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrAccessRefused) {
			t.Errorf("err %v is not ErrAccessRefused", err)
		}
	}
	err := us.CheckTopic(bob, "/", Write, "amq.topic", "a.b", "")
	if want := "write access to topic 'a.b' in exchange 'amq.topic' in vhost '/' refused for user 'bob'"; err == nil || err.Error() != want {
		t.Fatalf("text %v, want %s", err, want)
	}

	// The cache follows changes.
	var c TopicCache
	if c.Check(us, bob, "/", Write, "amq.topic", "x.y") == nil {
		t.Fatal("x.y allowed")
	}
	must(us.SetTopicPermissions("bob", "/", "amq.topic", `.*`, `.*`))
	if err := c.Check(us, bob, "/", Write, "amq.topic", "x.y"); err != nil {
		t.Fatalf("after change: %v", err)
	}

	// Listing, persistence, clearing.
	if got := us.TopicPermissions("bob", "/"); len(got) != 2 || got[0].Exchange != "amq.topic" || got[1].Exchange != "t2" {
		t.Fatalf("TopicPermissions = %+v", got)
	}
	us2 := mustNew(t, st, defaultOpts())
	if got := us2.ListTopicPermissions(); len(got) != 2 {
		t.Fatalf("reloaded: %+v", got)
	}
	must(us.ClearTopicPermissions("bob", "/", "t2"))
	if got := us.ListTopicPermissions(); len(got) != 1 {
		t.Fatalf("after clear t2: %+v", got)
	}
	must(us.SetTopicPermissions("bob", "/x", "amq.topic", "a", "b"))
	must(us.ClearVHost("/x"))
	if got := us.ListTopicPermissions(); len(got) != 1 {
		t.Fatalf("after ClearVHost: %+v", got)
	}
	must(us.DeleteUser("bob"))
	if got := us.ListTopicPermissions(); len(got) != 0 {
		t.Fatalf("after DeleteUser: %+v", got)
	}
	for _, k := range st.keys() {
		if strings.HasPrefix(k, topicPermPrefix) {
			t.Fatalf("left %s in the store", k)
		}
	}
	if err := us.SetTopicPermissions("nobody", "/", "amq.topic", "", ""); !errors.Is(err, ErrNoSuchUser) {
		t.Fatalf("unknown user: %v", err)
	}
	must(us.PutUser("bob", "pw", nil))
	if err := us.SetTopicPermissions("bob", "/", "amq.topic", "(", ""); !errors.Is(err, ErrBadRegex) {
		t.Fatalf("bad regex: %v", err)
	}
	if err := us.SetTopicPermissions("bob", "/", "amq.topic", "{client_id}(", ""); !errors.Is(err, ErrBadRegex) {
		t.Fatalf("bad regex with client_id: %v", err)
	}
}

func TestTopicOrphansDeletedOnLoad(t *testing.T) {
	st := newMemStore()
	st.m[topicPermKey("/", "ghost", "amq.topic")] = []byte(`{"user":"ghost","vhost":"/","exchange":"amq.topic","write":".*","read":".*"}`)
	mustNew(t, st, defaultOpts())
	if _, ok := st.m[topicPermKey("/", "ghost", "amq.topic")]; ok {
		t.Fatal("orphan topic permission kept")
	}
}

func BenchmarkTopicCacheHit(b *testing.B) {
	us := mustNew(b, newMemStore(), defaultOpts())
	_ = us.PutUser("bob", "pw", nil)
	_ = us.SetTopicPermissions("bob", "/", "amq.topic", `^a\.`, `.*`)
	bob, _ := us.Lookup("bob")
	var c TopicCache
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if c.Check(us, bob, "/", Write, "amq.topic", "a.b.c") != nil {
			b.Fatal("denied")
		}
	}
}
