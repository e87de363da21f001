package storetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// statser is implemented by stores that count their group commits.
type statser interface{ Stats() store.Stats }

// Bench runs the store benchmarks. open returns a fresh, empty store; the
// benchmark closes it. Each reports msgs/s, and for stores with Stats also
// msgs/batch and syncs/batch.
//
//	Append/w=1/window=1     one publisher waiting for each done before the next
//	Append/w=16/window=1    16 such publishers (group commit across publishers)
//	Append/w=1/window=256   one publisher with 256 appends in flight (confirm window)
//	Append/w=16/window=256  16 of those
//	AppendDelete/w=16/window=256      a consumer deletes each message once its done is called
//	AppendDeleteFast/w=16/window=256  a consumer deletes each message right after the append
//	                                  (before it is durable: the pair cancels in a group commit)
func Bench(b *testing.B, open func(b *testing.B) exchange.Store) {
	for _, c := range []struct {
		name    string
		writers int
		window  int
		del     int // 0 none, 1 delete after done, 2 delete right after append
	}{
		{"Append/w=1/window=1", 1, 1, 0},
		{"Append/w=16/window=1", 16, 1, 0},
		{"Append/w=1/window=256", 1, 256, 0},
		{"Append/w=16/window=256", 16, 256, 0},
		{"AppendDelete/w=16/window=256", 16, 256, 1},
		{"AppendDeleteFast/w=16/window=256", 16, 256, 2},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := open(b)
			defer closeQuiet(b, s)
			benchAppend(b, s, c.writers, c.window, c.del)
		})
	}
}

func benchAppend(b *testing.B, s exchange.Store, writers, window int, del int) {
	data := []byte("0123456789abcdef") // 16 bytes
	var before store.Stats
	st, hasStats := s.(statser)
	if hasStats {
		before = st.Stats()
	}
	var next atomic.Int64
	var failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			qid := uint64(w)
			sem := make(chan struct{}, window)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					break
				}
				sem <- struct{}{}
				seq := uint64(i)
				s.AppendMessage(qid, seq, data, func(err error) {
					if err != nil {
						failed.Add(1)
					}
					if del == 1 {
						s.DeleteMessage(qid, seq)
					}
					<-sem
				})
				if del == 2 {
					s.DeleteMessage(qid, seq)
				}
			}
			for range window { // wait for the last dones
				sem <- struct{}{}
			}
		}()
	}
	wg.Wait()
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d appends failed", n)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	if hasStats {
		after := st.Stats()
		batches := float64(after.Batches - before.Batches)
		if batches > 0 {
			b.ReportMetric(float64(after.Appends-before.Appends)/batches, "msgs/batch")
			b.ReportMetric(float64(after.Syncs-before.Syncs)/batches, "syncs/batch")
			if c := after.Cancelled - before.Cancelled; c > 0 {
				b.ReportMetric(float64(c)/float64(b.N), "cancelled/msg")
			}
		}
	}
}
