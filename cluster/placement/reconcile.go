package placement

import (
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
)

// reconcile runs while this node leads the group (one per term, until
// stop closes): a pass at once, then one on every membership change, a
// retry RetryEvery after a pass that could not finish, and the slow
// resync.
func (qq *quorumQueue) reconcile(r *raft.Raft, stop <-chan struct{}) {
	p := qq.p
	resync := time.NewTicker(p.c.ResyncEvery)
	defer resync.Stop()
	for {
		changed := p.changes()
		var retry *time.Timer
		var retryC <-chan time.Time
		if !qq.reconcilePass(r) {
			retry = time.NewTimer(p.c.RetryEvery)
			retryC = retry.C
		}
		select {
		case <-stop:
			return
		case <-p.done:
			return
		case <-changed:
		case <-retryC:
		case <-resync.C:
		}
		if retry != nil {
			retry.Stop()
		}
	}
}

// servers lists the IDs in r's latest configuration, sorted; votersOnly
// leaves the non-voters out.
func servers(r *raft.Raft, votersOnly bool) ([]string, error) {
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		if !votersOnly || s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	slices.Sort(out)
	return out, nil
}

// reconcilePass removes the members whose node left the cluster and,
// while the group is smaller than it was declared, adds alive nodes that
// are not members, recording the members cluster-wide first so that a
// new member starts its side of the group. It reports whether it got
// through (false: retry).
func (qq *quorumQueue) reconcilePass(r *raft.Raft) bool {
	p, log := qq.p, qq.p.log
	ids, err := servers(r, false)
	if err != nil {
		return false
	}
	status := map[string]discovery.Member{}
	for _, m := range p.c.Members() {
		status[m.Name] = m
	}
	ok, changed := true, false
	for _, id := range slices.Clone(ids) {
		if m, in := status[id]; in && m.Status == discovery.StatusLeft && id != p.c.Self {
			if err := r.RemoveServer(raft.ServerID(id), 0, 0).Error(); err != nil {
				log.Warn("quorum queue: remove member", "queue", qq.q.Name(), "member", id, "err", err)
				ok = false
				continue
			}
			log.Info("quorum queue shrunk: member left the cluster", "queue", qq.q.Name(), "member", id)
			ids = slices.DeleteFunc(ids, func(s string) bool { return s == id })
			changed = true
		}
	}
	target := max(len(qq.q.Seed()), 1)
	alive, drained := p.alive()
	// Not drained first: a member added now may lead later.
	slices.SortStableFunc(alive, func(a, b string) int { return cmpBool(drained[a], drained[b]) })
	for _, cand := range alive {
		if len(ids) >= target {
			break
		}
		if slices.Contains(ids, cand) {
			continue
		}
		addr, err := p.addrOf(cand)
		if err != nil {
			continue
		}
		next := append(slices.Clone(ids), cand)
		if err := qq.setMembers(next); err != nil {
			log.Warn("quorum queue: record members", "queue", qq.q.Name(), "err", err)
			ok = false
			break
		}
		// Announced as catching up before the other members see it
		// in the configuration (QuorumCritical).
		added := p.adding(cand)
		err = r.AddVoter(raft.ServerID(cand), raft.ServerAddress(addr), 0, 10*time.Second).Error()
		added()
		if err != nil {
			log.Warn("quorum queue: add member", "queue", qq.q.Name(), "member", cand, "err", err)
			ok = false
			break
		}
		log.Info("quorum queue grown", "queue", qq.q.Name(), "member", cand)
		ids, changed = next, true
	}
	if changed || !slices.Equal(sorted(ids), sorted(qq.q.Members())) {
		if err := qq.setMembers(ids); err != nil {
			log.Warn("quorum queue: record members", "queue", qq.q.Name(), "err", err)
			ok = false
		}
	}
	return ok
}

// setMembers records the group's members in the queue's definition.
func (qq *quorumQueue) setMembers(ids []string) error {
	return qq.p.c.Topology.SetQueueMembers(qq.q.VHost(), qq.q.Name(), qq.q.ID(), sorted(ids))
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
