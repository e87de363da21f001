package placement

import (
	"errors"
	"slices"

	"github.com/trident-broker/trident/cluster/quorum"
	"github.com/trident-broker/trident/exchange"
)

// leadership is quorum.Watch's callback: it switches the queue between
// local (leading: the live queue over a quorum.Log, and a reconciler for
// the term) and proxy (to the new leader).
func (qq *quorumQueue) leadership(leader bool) {
	qq.mu.Lock()
	if qq.closed || qq.r == nil {
		qq.mu.Unlock()
		return
	}
	old := qq.qlog
	qq.qlog = nil
	if leader {
		l, err := quorum.New(qq.r, quorum.Options{Logger: qq.p.c.Log, Applied: qq.q.LogApplied})
		if err != nil {
			qq.mu.Unlock()
			qq.p.log.Error("quorum queue log", "queue", qq.q.Name(), "err", err)
			return
		}
		qq.qlog = l
	}
	fsm, newLog, r := qq.fsm, qq.qlog, qq.r
	if qq.stopReconcile != nil {
		close(qq.stopReconcile)
		qq.stopReconcile = nil
	}
	if leader {
		qq.stopReconcile = make(chan struct{})
		go qq.reconcile(r, qq.stopReconcile)
	}
	qq.mu.Unlock()
	if leader {
		qq.p.log.Info("quorum queue leader here", "vhost", qq.q.VHost(), "queue", qq.q.Name())
		// The queue reads what it pages from the store: everything
		// applied goes there first, and from now on the FSM says what is.
		fsm.Flush()
		fsm.OnStored(qq.q.LogStored)
		var st exchange.LogState
		for _, g := range fsm.Groups() {
			st.Groups = append(st.Groups, exchange.LogGroup{Top: g.Top, Count: g.Count, Bytes: g.Bytes, MaxKey: g.MaxKey})
		}
		st.Returns = fsm.Returns
		st.HeldQID = quorum.HoldQID(qq.q.ID())
		st.StoredSeparately = !qq.q.IsStream()
		qq.q.BecomeLocal(newLog, st)
		qq.markReady()
	} else {
		fsm.OnStored(nil)
		qq.q.BecomeProxy(qq.p.proxy(qq))
	}
	if old != nil {
		_ = old.Close()
	}
}

// leaderAddr is the Locator of a replicated queue's proxy: the leader's
// mux address if this node is a member and knows it, else any alive
// member (whose own proxy forwards on).
func (qq *quorumQueue) leaderAddr() (string, error) {
	if r := qq.raft(); r != nil {
		addr, id := r.LeaderWithID()
		if addr == "" {
			return "", errors.New("quorum queue has no leader")
		}
		if string(id) == qq.p.c.Self {
			return "", errors.New("this node leads the queue")
		}
		return string(addr), nil
	}
	if slices.Contains(qq.q.Members(), qq.p.c.Self) {
		// This node's member is starting: wait for it to learn the leader.
		return "", errors.New("quorum queue group starting here")
	}
	var last error
	for _, m := range qq.q.Members() {
		if m == qq.p.c.Self {
			continue
		}
		a, err := qq.p.addrOf(m)
		if err == nil {
			return a, nil
		}
		last = err
	}
	if last == nil {
		last = errors.New("quorum queue has no members")
	}
	return "", last
}
