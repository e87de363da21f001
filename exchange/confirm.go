package exchange

import (
	"sync"
	"sync/atomic"
)

// Confirmer receives the outcome of a publish that was pending.
type Confirmer interface {
	Confirm(tag uint64, ok bool)
}

// NotAppendedConfirmer is a Confirmer that is told, instead of
// Confirm(tag, false), when a publish failed only because the message log
// of the one queue it reached never appended it (NotAppended: a quorum
// queue's leader that was handing over or had lost its leadership): no
// member holds the message, so it may be sent to the queue's next owner.
// cluster/forward's Server is one: the node that forwarded the message
// sends it on.
type NotAppendedConfirmer interface {
	Confirmer
	NotAppended(tag uint64)
}

type confirmWait struct {
	c      Confirmer
	tag    uint64
	v      *VHost // set when the wait is measured (LatPublishConfirm)
	start  int64  // when the core accepted the publish
	left   atomic.Int32
	failed atomic.Bool
	proto  Protocol
	// stores counts the queues that took the message to their log, and
	// notAppended those whose log answered NotAppended: when they are the
	// same one queue and nothing else failed, the publish was not stored
	// anywhere and a NotAppendedConfirmer may send it on.
	stores      atomic.Int32
	notAppended atomic.Int32
	fn          func(error) // w.done, bound once: waits are pooled
}

// waitPool recycles confirm waits: a confirmed publish would otherwise
// allocate the wait and the method value its queues call back.
var waitPool sync.Pool

func newConfirmWait(c Confirmer, tag uint64, proto Protocol) *confirmWait {
	w, _ := waitPool.Get().(*confirmWait)
	if w == nil {
		w = new(confirmWait)
		w.fn = w.done
	}
	w.c, w.tag, w.proto = c, tag, proto
	return w
}

// release returns w to the pool; its holder is the last: every queue
// that took its callback has called it.
func (w *confirmWait) release() {
	w.c, w.v, w.start = nil, nil, 0
	w.left.Store(0)
	w.failed.Store(false)
	w.stores.Store(0)
	w.notAppended.Store(0)
	waitPool.Put(w)
}

func (w *confirmWait) done(err error) {
	if err != nil {
		if NotAppended(err) {
			w.notAppended.Add(1)
		} else {
			w.failed.Store(true)
		}
	}
	if w.left.Add(-1) == 0 {
		if w.resendable() {
			if na, ok := w.c.(NotAppendedConfirmer); ok {
				na.NotAppended(w.tag) // sent on: its confirm comes later
				w.release()
				return
			}
		}
		if w.v != nil {
			w.v.observe(w.proto, LatPublishConfirm, w.v.b.confirmClock(w.start)-w.start)
		}
		w.c.Confirm(w.tag, !w.failed.Load() && w.notAppended.Load() == 0)
		w.release()
	}
}

// resendable: the one queue the publish reached never appended it.
func (w *confirmWait) resendable() bool {
	return !w.failed.Load() && w.notAppended.Load() == 1 && w.stores.Load() == 1
}
