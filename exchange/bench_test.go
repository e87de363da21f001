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

// BenchmarkBindMany binds N queues' keys to amq.topic and unbinds them:
// per binding, the cost must not grow with N (it grew linearly before the
// binding index).
func BenchmarkBindMany(b *testing.B) {
	for _, n := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			v, _ := newTestVHost(b)
			if _, err := v.DeclareQueue("q", QueueOpts{}); err != nil {
				b.Fatal(err)
			}
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("dev.%d.state", i)
			}
			b.ResetTimer()
			for range b.N {
				for _, k := range keys {
					if err := v.BindQueue("q", "amq.topic", k, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
				for _, k := range keys {
					if err := v.UnbindQueue("q", "amq.topic", k, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/binding")
		})
	}
}

// BenchmarkFanOutRoute publishes to a topic pattern bound by N queues:
// per queue reached, the cost must not grow with N.
func BenchmarkFanOutRoute(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			v, _ := newTestVHost(b)
			for i := range n {
				q := fmt.Sprintf("q%d", i)
				if _, err := v.DeclareQueue(q, QueueOpts{Args: Table{"x-max-length": int64(1)}}); err != nil {
					b.Fatal(err)
				}
				if err := v.BindQueue(q, "amq.topic", "all.#", nil, nil); err != nil {
					b.Fatal(err)
				}
			}
			m := &Message{Exchange: "amq.topic", RoutingKey: "all.x", Body: []byte("x")}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if res, err := v.Publish(m, PublishOpts{}); err != nil || res.Routed != n {
					b.Fatalf("routed %d, %v", res.Routed, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/queue")
		})
	}
}
