package exchange

import (
	"testing"
)

// BenchmarkStreamAppend appends to a stream as a front end's run of
// publishes does (a Batch flushed every 64), the store's writes
// included: the append path's allocations per message.
func BenchmarkStreamAppend(b *testing.B) {
	for _, chunks := range []bool{false, true} {
		name := "records"
		if chunks {
			name = "chunks"
		}
		b.Run(name, func(b *testing.B) {
			v, st := newTestVHost(b)
			if !chunks {
				v.b.SetCluster(&gatedCluster{fakeCluster: fakeCluster{name: "a"}})
			}
			declareQ(b, v, "s", QueueOpts{Durable: true, Args: Table{"x-queue-type": "stream"}})
			q, err := v.Queue("s", nil)
			if err != nil {
				b.Fatal(err)
			}
			m := &Message{RoutingKey: "s", Body: make([]byte, 100)}
			data := encodeMessage(m, 1, nil)
			var batch Batch
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				q.st.enqueue(m, data, nil, int64(i+1), &batch)
				if i%64 == 63 {
					batch.Flush()
				}
			}
			batch.Flush()
			b.StopTimer()
			st.WG.Wait()
		})
	}
}
