package exchange

import (
	"testing"
	"time"
)

func TestParseRetryDelays(t *testing.T) {
	ok := []struct {
		in   any
		want []time.Duration
	}{
		{"1s,2s,4s", []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{" 500ms , 1500 ", []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond}},
		{[]any{int32(100), "2s"}, []time.Duration{100 * time.Millisecond, 2 * time.Second}},
		{[]byte("1m"), []time.Duration{time.Minute}},
	}
	for _, c := range ok {
		got, err := parseRetryDelays(c.in)
		if err != nil || len(got) != len(c.want) {
			t.Fatalf("%v: %v, %v", c.in, got, err)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%v: %v, want %v", c.in, got, c.want)
			}
		}
	}
	for _, bad := range []any{"", "1s,,2s", "soon", "-1s", "0", int64(5), true, []any{"1s", true}, "100000h"} {
		if _, err := parseRetryDelays(bad); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
	v, _ := newTestVHost(t)
	_, err := v.DeclareQueue("q", QueueOpts{Args: Table{"x-retry-delays": "1s,later"}})
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "x-retry-delays")
	_, err = v.SetPolicy(Policy{Name: "p", Pattern: ".*", Definition: Table{"retry-delays": "x"}})
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "retry-delays")
	_, err = v.SetPolicy(Policy{Name: "p", Pattern: ".*", Definition: Table{"consumer-timeout": "x"}})
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "consumer-timeout")
}

// retrySetup declares q with args (a DLX "dlx" to queue "dead") and a
// manual-ack consumer on it.
func retrySetup(t *testing.T, v *VHost, args Table) (*Queue, *Queue, *sink) {
	t.Helper()
	declareX(t, v, "dlx", KindFanout, ExchangeOpts{})
	dead := declareQ(t, v, "dead", QueueOpts{})
	bindQ(t, v, "dead", "dlx", "", nil)
	args["x-dead-letter-exchange"] = "dlx"
	q := declareQ(t, v, "q", QueueOpts{Durable: true, Args: args})
	_, s := consume(t, v, "q", ConsumeOpts{Prefetch: 10})
	return q, dead, s
}

func TestRetryBackoffThenDeadLetter(t *testing.T) {
	for _, kind := range []string{"classic", "quorum"} {
		t.Run(kind, func(t *testing.T) { testRetryBackoff(t, kind) })
	}
}

func testRetryBackoff(t *testing.T, kind string) {
	v, _ := newTestVHost(t)
	q, dead, s := retrySetup(t, v, Table{"x-retry-delays": "100ms,300ms", "x-queue-type": kind})
	publishM(t, v, &Message{RoutingKey: "q", Body: []byte("m"), Props: Properties{DeliveryMode: 2}}, PublishOpts{})
	eventually(t, time.Second, "first delivery", func() bool { return s.len() == 1 })
	last := time.Now()
	for round, want := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond} {
		d := s.deliveries()[round]
		q.Reject([]uint64{d.Seq}, false)
		if ready(q) != 0 {
			t.Fatalf("round %d: the rejected message is still in the queue", round)
		}
		if n := v.MessagesRetrying(); n != 1 {
			t.Fatalf("round %d: MessagesRetrying = %d", round, n)
		}
		eventually(t, 3*time.Second, "the retry", func() bool { return s.len() == round+2 })
		if el := time.Since(last); el < want {
			t.Fatalf("round %d: back after %v, before its delay %v", round, el, want)
		}
		last = time.Now()
		r := s.deliveries()[round+1]
		if n, _ := asInt64(r.Msg.Props.Headers[RetryCountHeader]); n != int64(round+1) {
			t.Fatalf("round %d: %s = %v", round, RetryCountHeader, r.Msg.Props.Headers[RetryCountHeader])
		}
		if string(r.Msg.Body) != "m" || !r.Msg.Props.Persistent() {
			t.Fatalf("round %d: retried message %+v", round, r.Msg)
		}
	}
	// Out of delays: dead-lettered, with x-death as without retries.
	q.Reject([]uint64{s.deliveries()[2].Seq}, false)
	eventually(t, time.Second, "dead-lettered", func() bool { return ready(dead) == 1 })
	dd, ok := dead.Get(true)
	if !ok {
		t.Fatal("no dead letter")
	}
	deaths, _ := dd.Msg.Props.Headers["x-death"].([]any)
	if len(deaths) != 1 {
		t.Fatalf("x-death %v", dd.Msg.Props.Headers["x-death"])
	}
	if e, _ := asTable(deaths[0]); e["reason"] != "rejected" || e["queue"] != "q" {
		t.Fatalf("x-death entry %v", e)
	}
	if n, _ := asInt64(dd.Msg.Props.Headers[RetryCountHeader]); n != 2 {
		t.Fatalf("dead letter's retry count %v", dd.Msg.Props.Headers[RetryCountHeader])
	}
	if v.MessagesRetrying() != 0 {
		t.Fatal("retries left over")
	}
}

func TestRetryAbandon(t *testing.T) {
	v, _ := newTestVHost(t)
	q, _, s := retrySetup(t, v, Table{"x-retry-delays": []any{int32(100)}})
	publish(t, v, "", "q", "m")
	eventually(t, time.Second, "delivery", func() bool { return s.len() == 1 })
	q.Abandon([]uint64{s.deliveries()[0].Seq})
	if ready(q) != 0 {
		t.Fatal("an abandoned message with retry delays was requeued at once")
	}
	eventually(t, 2*time.Second, "the retry", func() bool { return s.len() == 2 })

	// Without retry delays, Abandon requeues at once.
	declareQ(t, v, "plain", QueueOpts{})
	p, _ := v.Queue("plain", nil)
	publish(t, v, "", "plain", "x")
	d, ok := p.Get(false)
	if !ok {
		t.Fatal("get")
	}
	p.Abandon([]uint64{d.Seq})
	if ready(p) != 1 {
		t.Fatal("abandoned message not requeued")
	}
}

func TestRetryPolicyAndRequeueUntouched(t *testing.T) {
	v, _ := newTestVHost(t)
	if _, err := v.SetPolicy(Policy{Name: "r", Pattern: "^q$", ApplyTo: ApplyToQueues, Definition: Table{"retry-delays": "150ms"}}); err != nil {
		t.Fatal(err)
	}
	q, _, s := retrySetup(t, v, Table{})
	if got := q.RetryDelays(); len(got) != 1 || got[0] != 150*time.Millisecond {
		t.Fatalf("RetryDelays from the policy: %v", got)
	}
	publish(t, v, "", "q", "m")
	eventually(t, time.Second, "delivery", func() bool { return s.len() == 1 })
	// requeue=true stays an immediate requeue.
	q.Reject([]uint64{s.deliveries()[0].Seq}, true)
	eventually(t, time.Second, "the requeued delivery", func() bool { return s.len() == 2 })
	if _, ok := s.deliveries()[1].Msg.Props.Headers[RetryCountHeader]; ok {
		t.Fatal("a requeue counted as a retry")
	}
	q.Reject([]uint64{s.deliveries()[1].Seq}, false)
	eventually(t, 2*time.Second, "the retry", func() bool { return s.len() == 3 })
	if n, _ := asInt64(s.deliveries()[2].Msg.Props.Headers[RetryCountHeader]); n != 1 {
		t.Fatalf("retry count %v", s.deliveries()[2].Msg.Props.Headers[RetryCountHeader])
	}
}

// Retries waiting in the store are routed after a restart (the store as a
// crash left it); transient ones are dropped.
func TestRetryRecovery(t *testing.T) {
	st := newFakeStore()
	b := newTestBroker(t, st)
	v := mustVHost(t, b, "/")
	q := declareQ(t, v, "q", QueueOpts{Durable: true, Args: Table{"x-retry-delays": "300ms"}})
	publishM(t, v, &Message{RoutingKey: "q", Body: []byte("p"), Props: Properties{DeliveryMode: 2}}, PublishOpts{})
	publish(t, v, "", "q", "t")
	for range 2 {
		d, ok := q.Get(false)
		if !ok {
			t.Fatal("get")
		}
		q.Reject([]uint64{d.Seq}, false)
	}
	rd := v.retryD.Load()
	rd.stop(false)
	<-rd.s.Done()

	b2 := newTestBroker(t, st)
	v2, _ := b2.VHost("/")
	if n := v2.MessagesRetrying(); n != 1 {
		t.Fatalf("MessagesRetrying after restart = %d, want 1", n)
	}
	q2, _ := v2.Queue("q", nil)
	eventually(t, 3*time.Second, "the recovered retry", func() bool { return ready(q2) == 1 })
	d, _ := q2.Get(true)
	if string(d.Msg.Body) != "p" {
		t.Fatalf("recovered %q", d.Msg.Body)
	}
}
