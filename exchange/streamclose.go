package exchange

import (
	"fmt"
	"time"

	"github.com/trident-broker/trident/exchange/streamlog"
)

// A stream's counts, its close and deletion, retention, and the
// broker's start and stop of its streams.

// stats are the counts a Queue's Stats reports: retained messages,
// deliveries not yet acked, consumers.
func (st *stream) stats() (msgs, unacked, consumers int) {
	n, _, _, _, _ := st.log.Stats()
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range st.cursors {
		unacked += c.out
	}
	return int(n), unacked, len(st.cursors)
}

// close stops the stream (deleted, or the broker stops): consumers are
// cancelled (cancelSinks) and named offsets flushed.
func (st *stream) close(cancelSinks bool) int {
	st.log.Flush() // the pending chunk (streamlog/chunk.go)
	st.flushOffsets()
	st.mu.Lock()
	if !st.closed.Swap(true) {
		close(st.stopC)
	}
	for id, cur := range st.cursors {
		cur.stop = true
		cur.c.cancelled = true
		cur.signal()
		if cur.up != nil {
			cur.up.r.Close()
		}
		if cancelSinks {
			cur.c.sink.Cancelled(cur.c)
		}
		delete(st.cursors, id)
	}
	st.share = sharing{}
	st.groups = nil
	if st.flushT != nil {
		st.flushT.Stop()
	}
	if st.retainT != nil {
		st.retainT.Stop()
	}
	if st.followStop != nil {
		close(st.followStop)
		st.followStop = nil
	}
	st.mu.Unlock()
	st.log.FireWaiters(streamlog.ErrClosed)
	n, _, _, _, _ := st.log.Stats()
	return int(n)
}

// drop deletes the log and the named offsets (the stream was deleted).
func (st *stream) drop() error {
	if err := st.log.DropAll(); err != nil {
		return err
	}
	return st.q.vh.b.replicatePrefix(st.offsetPrefix())
}

// --- retention ---

// retentionEvery is how often a stream with x-max-age looks for expired
// segments (besides at every segment roll).
func (st *stream) retentionEvery() time.Duration {
	return min(max(st.a.maxAge/4, time.Second), time.Minute)
}

func (st *stream) armRetention() {
	// By size at each segment roll; in a cluster on the timer too (a
	// leader's pass skips segments its FSM has not applied in full yet).
	if st.a.maxAge <= 0 && (st.a.maxBytes <= 0 || len(st.q.Members()) == 0) {
		return
	}
	st.mu.Lock()
	if !st.closed.Load() {
		st.retainT = time.AfterFunc(st.retentionEvery(), func() {
			st.applyRetention()
			st.armRetention()
		})
	}
	st.mu.Unlock()
}

// applyRetention removes whole segments past x-max-length-bytes or
// x-max-age. Readers inside a removed segment go on at the new first
// offset.
func (st *stream) applyRetention() {
	var cutoff int64
	if st.a.maxAge > 0 {
		cutoff = nowNano() - int64(st.a.maxAge)
	}
	if st.log.Leads() {
		if err := st.log.RetainReplicated(st.q.id, st.a.maxBytes, cutoff); err != nil {
			st.q.vh.b.log.Warn("stream retention not applied", "queue", st.q.name, "err", err)
		}
		return
	}
	gone := st.log.Retain(st.a.maxBytes, cutoff)
	if len(gone) == 0 {
		return
	}
	if err := st.log.DropSegments(gone); err != nil {
		st.q.vh.b.log.Warn("stream segments not removed", "queue", st.q.name, "err", err)
	}
}

// --- the broker's part ---

// recoverStreams loads the logs of the recovered streams.
func (b *Broker) recoverStreams(queues []*Queue) error {
	for _, q := range queues {
		if q.st == nil {
			continue
		}
		maxID, err := q.st.recover()
		if err != nil {
			return fmt.Errorf("stream '%s' in vhost '%s': %w", q.name, q.vh.name, err)
		}
		if maxID > b.qid.Load() && b.cluster == nil {
			b.qid.Store(maxID)
		}
	}
	return nil
}

// closeStreams flushes every stream's named offsets (a clean stop).
func (b *Broker) closeStreams() {
	for _, vn := range b.VHosts() {
		v, ok := b.VHost(vn)
		if !ok {
			continue
		}
		for _, q := range v.Queues() {
			if q.st != nil {
				q.st.flushOffsets()
			}
		}
	}
}
