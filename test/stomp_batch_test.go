package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/conf"
)

// stSends is n SEND frames to dest, bodies prefix-0 … prefix-(n-1), for
// one write.
func stSends(dest, prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "SEND\ndestination:%s\n\n%s-%d\x00", dest, prefix, i)
	}
	return b.String()
}

// expectBodies reads n MESSAGE frames from c and checks their bodies are
// prefix-0 … prefix-(n-1) in order; it returns when each arrived.
func (c *stRaw) expectBodies(prefix string, n int) []time.Time {
	c.t.Helper()
	at := make([]time.Time, n)
	for i := range n {
		f := c.read()
		if want := fmt.Sprintf("%s-%d", prefix, i); f.Command != "MESSAGE" || string(f.Body) != want {
			c.t.Fatalf("delivery %d: got %s %q, want MESSAGE %q", i, f.Command, f.Body, want)
		}
		at[i] = time.Now()
	}
	return at
}

// stSubscribedPair connects a consumer subscribed to dest (auto ack; the
// subscription is in place when it returns) and a publisher.
func stSubscribedPair(t *testing.T, b *broker, dest string) (cons, pub *stRaw) {
	t.Helper()
	cons = stDialRaw(t, b)
	cons.connect()
	cons.write("SUBSCRIBE\nid:0\ndestination:" + dest + "\nreceipt:r\n\n\x00")
	if f := cons.read(); f.Command != "RECEIPT" {
		t.Fatalf("got %s, want RECEIPT", f.Command)
	}
	pub = stDialRaw(t, b)
	pub.connect()
	return cons, pub
}

// TestSTOMPBatchDeliveries: the deliveries a STOMP publisher's frames make
// wait for the end of what one read brought in (its batch) and go out
// before the reader waits again, so a publisher that sends many SENDs at
// once and then nothing still has every one delivered: to a consumer on
// another connection, to itself, and while it is held by a rate limit.
func TestSTOMPBatchDeliveries(t *testing.T) {
	t.Run("other connection", func(t *testing.T) {
		b := stBroker(t)
		cons, pub := stSubscribedPair(t, b, "/queue/batch")
		const n = 2000
		pub.write(stSends("/queue/batch", "m", n)) // and nothing more
		cons.expectBodies("m", n)
	})

	t.Run("own connection", func(t *testing.T) {
		b := stBroker(t)
		c := stDialRaw(t, b)
		c.connect()
		const n = 2000
		c.write("SUBSCRIBE\nid:0\ndestination:/queue/self\n\n\x00" + stSends("/queue/self", "s", n))
		c.expectBodies("s", n)
	})

	// At one message a second per user, the second SEND of a write waits
	// a second in the reader: what the first delivered goes out first.
	t.Run("rate limited", func(t *testing.T) {
		b := stBroker(t, func(c *conf.Config) { c.Limits.PublishRatePerUser = 1 })
		cons, pub := stSubscribedPair(t, b, "/queue/rate")
		pub.write(stSends("/queue/rate", "r", 2))
		at := cons.expectBodies("r", 2)
		if gap := at[1].Sub(at[0]); gap < 500*time.Millisecond {
			t.Fatalf("the first delivery came %s before the second, which the rate limit held for a second: it waited for the batch", gap)
		}
	})
}
