package exchange

import (
	"fmt"
	"github.com/trident-broker/trident/exchange/sched"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

func TestMessageDelay(t *testing.T) {
	cases := []struct {
		name string
		h    Table
		ms   int64
		hold bool
		err  bool
	}{
		{"absent", Table{}, 0, false, false},
		{"int32", Table{"x-delay": int32(500)}, 500, true, false},
		{"int64", Table{"x-delay": int64(7)}, 7, true, false},
		{"uint8", Table{"x-delay": uint8(9)}, 9, true, false},
		{"zero", Table{"x-delay": int32(0)}, 0, false, false},
		{"negative routes at once", Table{"x-delay": int32(-5000)}, -5000, false, false},
		{"past the plugin's bound routes at once", Table{"x-delay": int64(sched.MaxDelay + 1)}, sched.MaxDelay + 1, false, false},
		{"at the bound", Table{"x-delay": int64(sched.MaxDelay)}, sched.MaxDelay, true, false},
		{"string", Table{"x-delay": "1500"}, 1500, true, false},
		{"bytes", Table{"x-delay": []byte("20")}, 20, true, false},
		{"negative string", Table{"x-delay": "-3"}, -3, false, false},
		{"float truncated", Table{"x-delay": 99.9}, 99, true, false},
		{"non-numeric string", Table{"x-delay": "soon"}, 0, false, true},
		{"bool is no delay", Table{"x-delay": true}, 0, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms, hold, err := messageDelay(c.h)
			if (err != nil) != c.err {
				t.Fatalf("err = %v, want error %v", err, c.err)
			}
			if err != nil {
				wantKind(t, err, KindPreconditionFailed)
				wantText(t, err, "x-delay")
				return
			}
			if ms != c.ms || hold != c.hold {
				t.Fatalf("got (%d, %v), want (%d, %v)", ms, hold, c.ms, c.hold)
			}
		})
	}
}

func TestDelayedDeclare(t *testing.T) {
	v, _ := newTestVHost(t)
	err := v.DeclareExchange("d", KindDelayed, ExchangeOpts{Durable: true})
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "x-delayed-type")
	err = v.DeclareExchange("d", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "nope"}})
	wantKind(t, err, KindPreconditionFailed)
	declareX(t, v, "d", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "topic"}})
	err = v.DeclareExchange("d", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "direct"}})
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "x-delayed-type")
	declareX(t, v, "d", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "topic"}})
}

func delayedMsg(x, key, body string, delay any, persistent bool) *Message {
	m := &Message{Exchange: x, RoutingKey: key, Body: []byte(body)}
	if delay != nil {
		m.Props.Headers = Table{"x-delay": delay}
	}
	if persistent {
		m.Props.DeliveryMode = 2
	}
	return m
}

func TestDelayedRoutesWhenDue(t *testing.T) {
	for _, kind := range []string{KindDirect, KindTopic, KindFanout, KindHeaders} {
		t.Run(kind, func(t *testing.T) {
			v, _ := newTestVHost(t)
			declareX(t, v, "d", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": kind}})
			declareQ(t, v, "q", QueueOpts{Durable: true})
			key := "k"
			var args Table
			switch kind {
			case KindTopic:
				key = "a.*"
			case KindHeaders:
				args = Table{"x-match": "all"}
				key = ""
			}
			bindQ(t, v, "q", "d", key, args)
			_, s := consume(t, v, "q", ConsumeOpts{NoAck: true})
			rk := "k"
			if kind == KindTopic {
				rk = "a.b"
			}
			start := time.Now()
			for _, p := range []struct {
				body  string
				delay any
			}{{"late", int32(300)}, {"early", int32(100)}, {"mid", "200"}} {
				r := publishM(t, v, delayedMsg("d", rk, p.body, p.delay, false), PublishOpts{})
				if r.Routed != 1 || !r.OK {
					t.Fatalf("publish %s: %+v", p.body, r)
				}
			}
			x, _ := v.Exchange("d")
			if n := x.MessagesDelayed(); n != 3 {
				t.Fatalf("MessagesDelayed = %d, want 3", n)
			}
			if kind != KindHeaders {
				// No delay and a negative one route at once.
				publishM(t, v, delayedMsg("d", rk, "now", nil, false), PublishOpts{})
				publishM(t, v, delayedMsg("d", rk, "neg", int32(-10), false), PublishOpts{})
				eventually(t, time.Second, "the undelayed messages", func() bool { return s.len() == 2 })
				if time.Since(start) > 90*time.Millisecond {
					t.Logf("slow machine: undelayed messages took %v", time.Since(start))
				}
			}
			want := []string{"early", "mid", "late"}
			if kind != KindHeaders {
				want = append([]string{"now", "neg"}, want...)
			}
			eventually(t, 3*time.Second, "the delayed messages", func() bool { return s.len() >= len(want) })
			if n := x.MessagesDelayed(); n != 0 {
				t.Fatalf("MessagesDelayed = %d after all were routed", n)
			}
			ds := s.deliveries()
			got := []string{}
			for _, d := range ds {
				got = append(got, string(d.Msg.Body))
			}
			if !equalStrings(got, want) {
				t.Fatalf("order %v, want %v", got, want)
			}
			last := ds[len(ds)-1]
			if d, _ := asInt64(last.Msg.Props.Headers["x-delay"]); d != -300 {
				t.Fatalf("x-delay of a routed message = %v, want -300", last.Msg.Props.Headers["x-delay"])
			}
			if el := time.Since(start); el < 300*time.Millisecond {
				t.Fatalf("the 300 ms message came after %v", el)
			}
		})
	}
}

func TestDelayedNonNumericRefused(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "d", KindDelayed, ExchangeOpts{Args: Table{"x-delayed-type": "direct"}})
	_, err := v.Publish(delayedMsg("d", "k", "x", "tomorrow", false), PublishOpts{})
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "x-delay")
}

// The window holds at most sched.WindowMsgs; the rest is read ahead from
// the store, and every message is routed once, in due order.
func TestDelayedWindowBoundedAndOrdered(t *testing.T) {
	v, st := newTestVHost(t)
	declareX(t, v, "d", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "direct"}})
	declareQ(t, v, "q", QueueOpts{})
	bindQ(t, v, "q", "d", "k", nil)
	_, s := consume(t, v, "q", ConsumeOpts{NoAck: true})
	x, _ := v.Exchange("d")
	const n = 3*sched.WindowMsgs + 77
	rng := rand.New(rand.NewPCG(1, 2))
	his := make([]int64, n) // latest due time of each message
	for i := range n {
		d := 1500 + rng.IntN(600)
		m := delayedMsg("d", "k", "", int32(d), true)
		lo := time.Now().UnixMilli() + int64(d)
		m.Body = fmt.Appendf(nil, "%d:%d", lo, i)
		publishM(t, v, m, PublishOpts{})
		his[i] = time.Now().UnixMilli() + int64(d) + 1
	}
	w := x.delay.s.Window()
	if w > sched.WindowMsgs {
		t.Fatalf("window holds %d messages, bound %d", w, sched.WindowMsgs)
	}
	// Every message not routed yet is in the store (a routed one leaves
	// the store after it reached the queue, so this order of looking
	// misses none).
	stored := len(st.StoredSeqs(x.delay.id))
	if routed := s.len(); stored+routed < n {
		t.Fatalf("%d stored and %d routed of %d", stored, routed, n)
	}
	eventually(t, 20*time.Second, "every delayed message", func() bool { return s.len() == n })
	seen := map[string]bool{}
	var prev int64
	for _, b := range s.bodies() {
		if seen[b] {
			t.Fatalf("%s routed twice", b)
		}
		seen[b] = true
		var lo int64
		var i int
		if _, err := fmt.Sscanf(b, "%d:%d", &lo, &i); err != nil {
			t.Fatal(err)
		}
		// Due order: each message's due time is between the clock read
		// before its publish and the one after.
		if his[i] < prev {
			t.Fatalf("message %d due by %d routed after one due at %d or later", i, his[i], prev)
		}
		prev = max(prev, lo)
	}
	if x.MessagesDelayed() != 0 {
		t.Fatalf("MessagesDelayed = %d after all routed", x.MessagesDelayed())
	}
	eventually(t, time.Second, "the store emptied", func() bool { return len(st.StoredSeqs(x.delay.id)) == 0 })
}

// A restart without a clean stop (the store as a crash left it) routes the
// persistent held messages and drops the transient ones.
func TestDelayedRecovery(t *testing.T) {
	st := newFakeStore()
	b := newTestBroker(t, st)
	v := mustVHost(t, b, "/")
	declareX(t, v, "d", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "direct"}})
	declareQ(t, v, "q", QueueOpts{Durable: true})
	bindQ(t, v, "q", "d", "k", nil)
	for i := range 5 {
		publishM(t, v, delayedMsg("d", "k", "p"+strconv.Itoa(i), int32(400+i), true), PublishOpts{})
	}
	publishM(t, v, delayedMsg("d", "k", "transient", int32(400), false), PublishOpts{})
	x, _ := v.Exchange("d")
	id := x.delay.id
	x.delay.stop(false) // the old broker's clock stops, as in a crash
	<-x.delay.s.Done()

	b2 := newTestBroker(t, st)
	v2, _ := b2.VHost("/")
	x2, ok := v2.Exchange("d")
	if !ok || x2.delay == nil || x2.delay.id != id {
		t.Fatalf("delayed exchange not recovered with its id: %+v", x2)
	}
	if n := x2.MessagesDelayed(); n != 5 {
		t.Fatalf("MessagesDelayed after restart = %d, want 5", n)
	}
	q2, _ := v2.Queue("q", nil)
	eventually(t, 3*time.Second, "recovered delayed messages routed", func() bool { return ready(q2) == 5 })
	got := getBodies(q2)
	if !equalStrings(got, []string{"p0", "p1", "p2", "p3", "p4"}) {
		t.Fatalf("recovered %v", got)
	}
	// A new queue does not take the delay store's id.
	q3 := declareQ(t, v2, "q3", QueueOpts{Durable: true})
	if q3.id == id {
		t.Fatalf("a new queue reused the delay id %d", id)
	}
}

func TestDelayedExchangeDeleteDropsMessages(t *testing.T) {
	v, st := newTestVHost(t)
	declareX(t, v, "d", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "direct"}})
	x, _ := v.Exchange("d")
	for range 10 {
		publishM(t, v, delayedMsg("d", "k", "x", int32(60000), true), PublishOpts{})
	}
	if len(st.StoredSeqs(x.delay.id)) != 10 {
		t.Fatal("not stored")
	}
	if err := v.DeleteExchange("d", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "stored delayed messages dropped", func() bool {
		return len(st.StoredSeqs(x.delay.id)) == 0 && len(st.MetaKeys(delayRegistryPrefix)) == 0
	})
}

func TestDelayedConfirmWaitsForStore(t *testing.T) {
	v, st := newTestVHost(t)
	declareX(t, v, "d", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "direct"}})
	st.Mu.Lock()
	st.Hold = true
	st.Mu.Unlock()
	c := newConfirms()
	r := publishM(t, v, delayedMsg("d", "k", "x", int32(60000), true), PublishOpts{Confirmer: c, Tag: 1})
	if !r.Pending {
		t.Fatalf("a persistent delayed publish with a confirmer is not pending: %+v", r)
	}
	if len(c.get(1)) != 0 {
		t.Fatal("confirmed before the store wrote it")
	}
	st.Release()
	eventually(t, time.Second, "the confirm", func() bool { return len(c.get(1)) == 1 && c.get(1)[0] })
}
