package exchange

import (
	"testing"
	"time"
)

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := &tokenBucket{rate: 10, tokens: 10, last: t0}
	for i := range 10 {
		if w := b.take(t0); w != 0 {
			t.Fatalf("take %d within the burst waits %s", i, w)
		}
	}
	if w := b.take(t0); w != 100*time.Millisecond {
		t.Fatalf("first take past the burst waits %s, want 100ms", w)
	}
	if w := b.take(t0); w != 200*time.Millisecond {
		t.Fatalf("second take past the burst waits %s, want 200ms (reservations queue)", w)
	}
	// A second later the debt is paid and 8 tokens are back.
	if w := b.take(t0.Add(time.Second)); w != 0 {
		t.Fatalf("take after refill waits %s", w)
	}
	if b.tokens != 7 {
		t.Fatalf("tokens %v, want 7", b.tokens)
	}
	// The bucket never holds more than one second's worth.
	b.take(t0.Add(time.Hour))
	if b.tokens != 9 {
		t.Fatalf("tokens after an hour %v, want 9", b.tokens)
	}
}

func TestLimiterConnections(t *testing.T) {
	l := newLimiter()
	l.Set(Limits{MaxConnectionsPerUser: 2, MaxConnectionsPerVHost: 3})
	r1, err := l.OpenConnection("a", "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenConnection("a", "/"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenConnection("a", "/"); KindOf(err) != KindNotAllowed {
		t.Fatalf("user over its limit: %v", err)
	}
	if _, err := l.OpenConnection("b", "/"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenConnection("c", "/"); KindOf(err) != KindNotAllowed {
		t.Fatalf("vhost over its limit: %v", err)
	}
	r1()
	r1() // idempotent
	if u, v := l.Connections("a", "/"); u != 1 || v != 2 {
		t.Fatalf("after release: user %d vhost %d, want 1 and 2", u, v)
	}
	if _, err := l.OpenConnection("c", "/"); err != nil {
		t.Fatal(err)
	}
}

func TestLimiterWaitPublish(t *testing.T) {
	l := newLimiter()
	if !l.WaitPublish("u", "/", nil) || l.RateLimited() {
		t.Fatal("no limit must not wait")
	}
	l.Set(Limits{PublishRatePerVHost: 1})
	if !l.WaitPublish("u", "/", nil) {
		t.Fatal("the burst must pass")
	}
	abort := make(chan struct{})
	close(abort)
	if l.WaitPublish("u", "/", abort) {
		t.Fatal("a publish over the rate must wait, and stop waiting on abort")
	}
	if !l.WaitPublish("u", "/other", nil) {
		t.Fatal("another vhost has its own bucket")
	}
}

func TestQueueLimit(t *testing.T) {
	b, err := New(newFakeStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.Limiter().Set(Limits{MaxQueuesPerVHost: 1})
	if err := b.EnsureVHost("/"); err != nil {
		t.Fatal(err)
	}
	v, _ := b.VHost("/")
	if _, err := v.DeclareQueue("a", QueueOpts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.DeclareQueue("a", QueueOpts{}); err != nil {
		t.Fatalf("redeclare: %v", err)
	}
	if _, err := v.DeclareQueue("b", QueueOpts{}); KindOf(err) != KindPreconditionFailed {
		t.Fatalf("second queue: %v, want precondition failed", err)
	}
}
