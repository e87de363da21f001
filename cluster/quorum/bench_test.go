package quorum

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func defaultTimeouts(rc *raft.Config) {
	d := raft.DefaultConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = d.HeartbeatTimeout, d.ElectionTimeout
	rc.LeaderLeaseTimeout, rc.CommitTimeout = d.LeaderLeaseTimeout, d.CommitTimeout
}

// BenchmarkAppend measures appends of 16-byte messages through the
// leader's Log of a three-member in-process group (in-memory transport
// and stores: the Log's batching and Raft's own cost, no disk, no
// network). Each iteration is one append whose done callback is awaited
// at the end; appends/s is reported. Raft's default (production) timeouts:
// the tests' 50 ms ones lose leadership when the producer saturates the CPU.
func BenchmarkAppend(b *testing.B) {
	c := newCluster(b, 3, defaultTimeouts)
	ld := c.leader()
	l, err := New(ld.r, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	data := msg(0)
	done := make(chan error, 1024)
	var failed int
	var firstErr error
	collected := make(chan struct{})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() {
		for i := 0; i < b.N; i++ {
			if err := <-done; err != nil {
				if failed == 0 {
					firstErr = err
				}
				failed++
			}
		}
		close(collected)
	}()
	for i := 0; i < b.N; i++ {
		l.AppendMessage(1, uint64(i), data, func(err error) { done <- err })
		if i%2 == 1 {
			l.DeleteMessage(1, uint64(i-1)) // keep the state small, as a consumed queue does
		}
	}
	<-collected
	elapsed := time.Since(start)
	b.StopTimer()
	if failed > 0 {
		b.Fatalf("%d of %d appends failed, the first with: %v", failed, b.N, firstErr)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
	b.ReportMetric(float64(b.N)/float64(ld.r.LastIndex()), "appends/entry")
}

// BenchmarkAppendSerial awaits each append before the next: the commit
// latency of one message, with no batching to help.
func BenchmarkAppendSerial(b *testing.B) {
	c := newCluster(b, 3, defaultTimeouts)
	ld := c.leader()
	l, err := New(ld.r, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	data := msg(0)
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		l.AppendMessage(1, uint64(i), data, func(err error) { done <- err })
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		l.DeleteMessage(1, uint64(i))
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
}
