package exchange

import (
	"fmt"
	"testing"
)

// BenchmarkPublishDirect: one queue, one no-ack consumer whose sink drops,
// 16-byte transient messages through a direct exchange.
func BenchmarkPublishDirect(b *testing.B) {
	v, _ := newTestVHost(b)
	declareX(b, v, "x", KindDirect, ExchangeOpts{})
	declareQ(b, v, "q", QueueOpts{})
	bindQ(b, v, "q", "x", "k", nil)
	if _, err := v.Consume("q", ConsumeOpts{NoAck: true, Sink: dropSink{}}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := &Message{Exchange: "x", RoutingKey: "k", Body: body}
		if _, err := v.Publish(m, PublishOpts{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishDirectParallel is the same from GOMAXPROCS publishers.
func BenchmarkPublishDirectParallel(b *testing.B) {
	v, _ := newTestVHost(b)
	declareQ(b, v, "q", QueueOpts{})
	if _, err := v.Consume("q", ConsumeOpts{NoAck: true, Sink: dropSink{}}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := &Message{RoutingKey: "q", Body: body}
			if _, err := v.Publish(m, PublishOpts{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkTopicRoute routes through a topic exchange holding 1000
// bindings (a mix of literal, '*' and '#' patterns) to queues without
// consumers that are purged as they fill.
func BenchmarkTopicRoute(b *testing.B) {
	v, _ := newTestVHost(b)
	declareX(b, v, "t", KindTopic, ExchangeOpts{})
	const nq = 10
	qs := make([]*Queue, nq)
	for i := range qs {
		qs[i] = declareQ(b, v, fmt.Sprint("q", i), QueueOpts{})
	}
	for i := 0; i < 1000; i++ {
		var p string
		switch i % 4 {
		case 0:
			p = fmt.Sprintf("stock.%d.nyse", i)
		case 1:
			p = fmt.Sprintf("stock.*.%d", i)
		case 2:
			p = fmt.Sprintf("%d.#", i)
		default:
			p = fmt.Sprintf("#.%d.quote", i)
		}
		bindQ(b, v, qs[i%nq].Name(), "t", p, nil)
	}
	keys := []string{"stock.4.nyse", "stock.x.1", "2.a.b.c", "a.b.3.quote", "no.match.here"}
	routed := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := &Message{Exchange: "t", RoutingKey: keys[i%len(keys)]}
		r, err := v.Publish(m, PublishOpts{})
		if err != nil {
			b.Fatal(err)
		}
		routed += r.Routed
		if i%4096 == 4095 {
			b.StopTimer()
			for _, q := range qs {
				q.Purge()
			}
			b.StartTimer()
		}
	}
	if b.N >= len(keys) && routed == 0 {
		b.Fatal("nothing routed")
	}
}

// BenchmarkTopicMatch measures the trie alone.
func BenchmarkTopicMatch(b *testing.B) {
	r := newTopicRouter()
	for i := 0; i < 1000; i++ {
		r.add(&binding{key: fmt.Sprintf("a.%d.#", i)})
	}
	r.add(&binding{key: "a.*.c"})
	var buf [16]*binding
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(r.route("a.500.c", nil, buf[:0])) != 2 {
			b.Fatal("wrong match")
		}
	}
}

func BenchmarkEncodeMessage(b *testing.B) {
	m := sampleMessages()[0]
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = encodeMessage(m, 1, buf[:0])
	}
}

// BenchmarkQuorumLeaderPublish: a quorum queue led here from a log that
// commits every 64 publishes (lateLog), one no-ack consumer whose sink
// drops, 16-byte messages: the leader's publish, commit and delivery.
func BenchmarkQuorumLeaderPublish(b *testing.B) {
	v, st := newTestVHost(b)
	q := declareQ(b, v, "qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum"}})
	l := &lateLog{st: st, q: q}
	q.BecomeLocal(l, LogState{})
	if _, err := v.Consume("qq", ConsumeOpts{NoAck: true, Sink: dropSink{}}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := &Message{RoutingKey: "qq", Body: body}
		if _, err := v.Publish(m, PublishOpts{}); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			l.commit(-1)
		}
	}
	l.commit(-1)
	if r := ready(q); r != 0 {
		b.Fatalf("%d left ready", r)
	}
}
