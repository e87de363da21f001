package groups

import (
	"errors"
	"hash/fnv"
	"io"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/mux"
)

// A leader's node that dies is seen at once by its followers' nodes
// when the process is gone and its host is not: the kernel closes the
// coalesced heartbeat connection it had open to each of them, and a
// dial to its address is refused. Raft's own detection would wait out
// the follower's heartbeat timeout, 1-2 s for a quorum queue (and as
// long again when the first candidate's pre-vote is refused by a member
// that still knows the old leader). So when a heartbeat connection that
// carried heartbeats ends and a new dial to the node it came from is
// refused, each group here that follows that node stands for election
// at once, as a leadership transfer's target does (raft's TimeoutNow,
// sent by the node to its own member): no pre-vote, and the other
// members vote for it although they still know the old leader. Only one
// member of a group does so at first (an order of the surviving voters
// that depends on the group, so leaderships spread); the next stands
// downStagger later if the group has no other leader by then (the
// first's log may have been behind), and so on. A timed-out dial, a
// partition or a frozen process is not a refusal: those are left to
// raft's timers, so a slow or loaded node never causes an election this
// way.

// downStagger is how long the surviving voter ranked k waits (k ×
// downStagger) before it stands for election.
const downStagger = 200 * time.Millisecond

// downProbeTimeout bounds the dial that tells a dead process from a
// connection that merely closed.
const downProbeTimeout = time.Second

// A dial reset or closed during its handshake is tried again up to
// downProbes times, downProbeEvery apart.
const (
	downProbes     = 5
	downProbeEvery = 20 * time.Millisecond
)

// lost is called when an accepted heartbeat connection from the node at
// addr, which carried heartbeats, ends: if a new dial to addr is
// refused (or its mux no longer has the heartbeat stream: its groups are
// closed, it is stopping), the node's groups that follow it elect.
func (h *heartbeats) lost(addr string) {
	if addr == "" || h.down == nil {
		return
	}
	for try := 0; ; try++ {
		c, err := h.mux.Dial(addr, HeartbeatStream, downProbeTimeout)
		if err == nil {
			c.Close()
			return
		}
		var re *mux.RefusedError
		if errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &re) && re.Status == mux.StatusUnknownStream) {
			break // no process there, or one whose groups are closed
		}
		// A process being killed may still take the connection and
		// then reset it (or close it): ask again, a few times.
		if try >= downProbes || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
			return
		}
		time.Sleep(downProbeEvery)
	}
	h.log.Info("peer's process is gone (heartbeat connection closed, dial refused): its groups here elect", "peer", addr)
	h.down(addr)
}

// peerDown makes the groups whose leader is the node at addr elect
// (above): the first ranked surviving voter at once, the others staggered.
func (h *Host) peerDown(addr string) {
	h.mu.Lock()
	var gs []*group
	var names []string
	for name, g := range h.groups {
		gs, names = append(gs, g), append(names, name)
	}
	h.mu.Unlock()
	for i, g := range gs {
		if !g.follows(addr) {
			continue
		}
		rank := h.electionRank(names[i], g, addr)
		if rank < 0 {
			continue
		}
		if rank == 0 {
			g.standNow(names[i], h)
			continue
		}
		time.AfterFunc(time.Duration(rank)*downStagger, func() {
			if g.follows(addr) {
				g.standNow(names[i], h)
			}
		})
	}
}

// follows reports whether g's member here is a follower that knows the
// node at addr as its leader, or knows no leader.
func (g *group) follows(addr string) bool {
	if g.r.State() != raft.Follower {
		return false
	}
	leader, _ := g.r.LeaderWithID()
	return leader == raft.ServerAddress(addr) || leader == ""
}

// electionRank is this node's place among group name's voters other than
// the one at addr, in an order of their IDs hashed with the group's
// name; -1 if it is not a voter.
func (h *Host) electionRank(name string, g *group, addr string) int {
	f := g.r.GetConfiguration()
	if f.Error() != nil {
		return -1
	}
	type voter struct {
		id  string
		key uint64
	}
	var vs []voter
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || s.Address == raft.ServerAddress(addr) {
			continue
		}
		hs := fnv.New64a()
		hs.Write([]byte(name))
		hs.Write([]byte{0})
		hs.Write([]byte(s.ID))
		vs = append(vs, voter{id: string(s.ID), key: hs.Sum64()})
	}
	slices.SortFunc(vs, func(a, b voter) int {
		if a.key != b.key {
			if a.key < b.key {
				return -1
			}
			return 1
		}
		if a.id < b.id {
			return -1
		}
		return 1
	})
	return slices.IndexFunc(vs, func(v voter) bool { return v.id == h.c.NodeID })
}

// standNow makes g's member here a candidate at once: the node sends its
// own member a TimeoutNow, as a leader does to hand its leadership over
// (so the member skips the pre-vote and the others vote for it although
// they still know a leader). It is sent over the group's transport to
// this node's own address.
func (g *group) standNow(name string, h *Host) {
	self := h.Self()
	req := &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(self.ID),
		Addr:            g.trans.EncodePeer(self.ID, self.Address),
	}}
	var resp raft.TimeoutNowResponse
	if err := g.trans.TimeoutNow(self.ID, self.Address, req, &resp); err != nil {
		h.c.Log.Debug("groups: standing for election after the leader's process went", "group", name, "err", err)
	}
}
