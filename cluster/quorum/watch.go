package quorum

import (
	"time"

	"github.com/hashicorp/raft"
)

// watchPoll is how often a Watcher reads the Raft state even when no
// observation woke it (a safety net: observations are not expected to be
// missed, see Watch).
const watchPoll = 10 * time.Second

// watchRetry is how soon a Watcher retries a failed Barrier while the
// node is still leader.
const watchRetry = 50 * time.Millisecond

// Watcher reports a Raft node's leadership to a callback; see Watch.
type Watcher struct {
	r    *raft.Raft
	obs  *raft.Observer
	wake chan raft.Observation
	quit chan struct{}
	done chan struct{}
}

// Watch calls onChange(true) when r becomes leader and its FSM holds
// every committed entry, and onChange(false) when it stops being leader
// (including when r shuts down). Calls alternate, starting with true,
// from one goroutine of the Watcher's; a slow onChange delays the next
// report but nothing in Raft. If r loses and regains leadership between
// two looks (a new term), onChange(false) then onChange(true) are both
// reported: the node must rebuild the queue, another leader may have
// committed entries in between.
//
// How: a raft.Observer for raft.RaftState and raft.LeaderObservation
// wakes the Watcher, which then reads r.State() and r.CurrentTerm(); the
// observation itself is only a wake-up, so one dropped because the
// channel (capacity 1) is full loses nothing (raft publishes a RaftState
// after the state changed). r.LeaderCh is not used: it holds one value
// and overwrites it, and belongs to whoever else may read it. On
// becoming leader the Watcher waits for r.Barrier(barrierTimeout) and
// reports leadership only if the node is still leader in the same term
// afterwards; a failed Barrier is retried while the node stays leader.
func Watch(r *raft.Raft, barrierTimeout time.Duration, onChange func(leader bool)) *Watcher {
	w := &Watcher{
		r:    r,
		wake: make(chan raft.Observation, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	w.obs = raft.NewObserver(w.wake, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.RaftState, raft.LeaderObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(w.obs)
	go w.run(barrierTimeout, onChange)
	return w
}

// Stop stops the Watcher and waits for a running onChange to return. It
// reports nothing: a caller that saw onChange(true) knows it stopped
// watching. Stop must not be called from onChange.
func (w *Watcher) Stop() {
	select {
	case <-w.quit:
	default:
		w.r.DeregisterObserver(w.obs)
		close(w.quit)
	}
	<-w.done
}

func (w *Watcher) run(barrierTimeout time.Duration, onChange func(bool)) {
	defer close(w.done)
	poll := time.NewTicker(watchPoll)
	defer poll.Stop()
	var (
		leader bool
		term   uint64 // the term leader was reported for
		retry  <-chan time.Time
	)
	for {
		retry = nil
		if w.r.State() == raft.Leader {
			t := w.r.CurrentTerm()
			if leader && t != term {
				leader = false
				onChange(false)
			}
			if !leader {
				err := w.r.Barrier(barrierTimeout).Error()
				if err == nil && w.r.State() == raft.Leader && w.r.CurrentTerm() == t {
					leader, term = true, t
					onChange(true)
				} else {
					retry = time.After(watchRetry)
				}
			}
		} else if leader {
			leader = false
			onChange(false)
		}
		select {
		case <-w.wake:
		case <-poll.C:
		case <-retry:
		case <-w.quit:
			return
		}
	}
}
