package quorum

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// gateFSM blocks every Apply until open is closed.
type gateFSM struct {
	open    chan struct{}
	started chan struct{}
	once    sync.Once
}

func (f *gateFSM) Apply(*raft.Log) any {
	f.once.Do(func() { close(f.started) })
	<-f.open
	return nil
}
func (f *gateFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, raft.ErrNothingNewToSnapshot }
func (f *gateFSM) Restore(io.ReadCloser) error         { return nil }

// TestLogShutdownAnswersEveryAppend: Raft shuts down while committed
// batches wait for its FSM (hashicorp/raft leaves those futures
// unanswered); every append's done callback still comes, with an error
// for those Raft did not answer.
func TestLogShutdownAnswersEveryAppend(t *testing.T) {
	conf := raft.DefaultConfig()
	conf.LocalID = "a"
	conf.HeartbeatTimeout, conf.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
	conf.LeaderLeaseTimeout, conf.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
	conf.LogLevel = "error"
	store := raft.NewInmemStore()
	_, trans := raft.NewInmemTransport("a")
	fsm := &gateFSM{open: make(chan struct{}), started: make(chan struct{})}
	r, err := raft.NewRaft(conf, fsm, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "a", Address: trans.LocalAddr()}}}).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Batches of one message each, many in flight: they commit and queue
	// for the blocked FSM.
	l, err := New(r, Options{MaxBatchBytes: 64, EagerBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := 0; i < n; i++ {
		wg.Add(1)
		l.AppendMessage(1, uint64(i), make([]byte, 48), func(err error) {
			mu.Lock()
			if err != nil {
				failed++
			}
			mu.Unlock()
			wg.Done()
		})
	}
	<-fsm.started
	time.Sleep(200 * time.Millisecond) // the rest commit and queue for the FSM
	shut := r.Shutdown()
	for r.State() != raft.Shutdown {
		time.Sleep(time.Millisecond)
	}
	close(fsm.open)
	if err := shut.Error(); err != nil {
		t.Fatal(err)
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("done callbacks missing after Raft shut down")
	}
	t.Logf("%d of %d appends failed with the shutdown", failed, n)
	l.Close()
}
