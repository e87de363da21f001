package groups

import (
	"bytes"
	"time"

	"github.com/hashicorp/raft"
)

// Keepalives (doc.go, "Many groups"): for a group whose Timing has
// Keepalives, the node, not the group's raft, keeps the group's
// heartbeats going. Every hbKeepEvery one loop sends, for every such
// group and follower, raft's latest heartbeat to that follower again,
// all of them into the peers' coalesced writes; the follower's raft
// handles it as any heartbeat. Raft's own heartbeats, rare on a leader
// (Timing.LeaderHeartbeatTimeout), are answered from the latest
// keepalive answer while it is fresh, else sent as before.
//
// What keeps this honest:
//
//   - A keepalive is a heartbeat raft itself sent: the same term and
//     leader. It is repeated only while raft keeps sending it (for
//     groupTransport.keepFor after the last time, a little more than
//     raft's heartbeat interval), so a member that stops leading stops
//     being repeated soon after; one that shuts down at once (its
//     transport closes). A follower ignores a heartbeat of an old term,
//     so a deposed leader's keepalives hold no election back.
//   - An answer stands for raft's heartbeat only if it succeeded for the
//     same heartbeat, was sent less than hbKeepFresh ago and came over a
//     connection that has not failed since; otherwise raft's heartbeat
//     goes out and raft sees the follower's own answer (a higher term,
//     an error).
//   - A follower hears from a live leader every hbKeepEvery (plus the
//     10 ms linger), well inside its 1 s heartbeat timeout; the leader
//     sees contact at each of its own heartbeats, within its lease.

const (
	// hbKeepEvery is how often the keepalives go out.
	hbKeepEvery = 400 * time.Millisecond
	// hbKeepFresh is how long a keepalive's answer stands for raft's
	// heartbeats: two rounds, so that one late answer is no gap.
	hbKeepFresh = 2 * hbKeepEvery
)

// hbBeat is a group's heartbeat to one follower: raft's latest, the
// latest successful answer, and the keepalive in flight.
type hbBeat struct {
	peer  *hbPeer
	req   raft.AppendEntriesRequest // raft's latest heartbeat (own copy)
	ver   uint64                    // counts changes of req
	asked time.Time                 // when raft last sent it

	ok   bool // resp is a successful answer to req...
	resp raft.AppendEntriesResponse
	at   time.Time // ...to req sent then
	gen  uint64    // ...over peer's connection of this generation

	posted time.Time // a keepalive in flight since; zero: none
	seq    uint64
}

// fresh reports whether b's answer stands for a heartbeat at now.
func (b *hbBeat) fresh(now time.Time) bool {
	return b.ok && b.gen == b.peer.gen.Load() && now.Sub(b.at) < hbKeepFresh
}

// sameHeartbeat reports whether a and b are the same raft heartbeat.
func sameHeartbeat(a, b *raft.AppendEntriesRequest) bool {
	return a.Term == b.Term && a.ProtocolVersion == b.ProtocolVersion &&
		bytes.Equal(a.Leader, b.Leader) && bytes.Equal(a.ID, b.ID) && bytes.Equal(a.Addr, b.Addr)
}

// heartbeat is AppendEntries for a heartbeat of a group with keepalives.
func (t *groupTransport) heartbeat(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	now := time.Now()
	t.mu.Lock()
	b := t.beats[target]
	if b == nil {
		t.mu.Unlock()
		p, err := t.hb.peer(string(target)) // one per address until the host closes
		if err != nil {
			return err
		}
		t.mu.Lock()
		if b = t.beats[target]; b == nil {
			b = &hbBeat{peer: p}
			t.beats[target] = b
		}
	}
	p := b.peer
	if !sameHeartbeat(&b.req, args) {
		b.req = raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: args.ProtocolVersion, ID: bytes.Clone(args.ID), Addr: bytes.Clone(args.Addr)},
			Term:      args.Term,
			Leader:    bytes.Clone(args.Leader),
		}
		b.ver++
		b.ok = false
	}
	b.asked = now
	if b.fresh(now) {
		*resp = b.resp
		t.mu.Unlock()
		return nil
	}
	ver, gen := b.ver, p.gen.Load()
	t.mu.Unlock()
	mine := t.lastIndex()
	err := p.send(t.group, args, resp)
	t.mu.Lock()
	if b.ver == ver {
		b.answered(err == nil, resp, now, gen)
	}
	if err == nil && resp.Success {
		t.noteLogLocked(target, resp, mine, now)
	}
	t.mu.Unlock()
	return err
}

// answered records the answer to b's heartbeat sent at with gen: a
// success keeps it, anything else clears b's answer.
func (b *hbBeat) answered(ok bool, resp *raft.AppendEntriesResponse, at time.Time, gen uint64) {
	if ok && resp.Success && resp.Term == b.req.Term {
		if !b.ok || at.After(b.at) {
			b.ok, b.resp, b.at, b.gen = true, *resp, at, gen
		}
		return
	}
	b.ok = false
}

// keepalive sends the keepalives of t's groups that are due at now.
func (t *groupTransport) keepalive(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for target, b := range t.beats {
		if !b.posted.IsZero() {
			if now.Sub(b.posted) < hbTimeout {
				continue // the previous one is still in flight
			}
			b.peer.cancel(b.seq)
			b.posted, b.ok = time.Time{}, false
		}
		if now.Sub(b.asked) >= t.keepFor {
			if now.Sub(b.asked) > time.Minute {
				delete(t.beats, target) // raft stopped heartbeating it long ago
			}
			continue
		}
		ver, gen, sent, mine := b.ver, b.peer.gen.Load(), now, t.lastIndex()
		seq, err := b.peer.post(t.group, &b.req, func(r hbResp) {
			t.mu.Lock()
			defer t.mu.Unlock()
			if !b.posted.Equal(sent) {
				return // given up on, or not this one
			}
			b.posted = time.Time{}
			if b.ver == ver {
				b.answered(r.seq != 0 && r.err == "", &r.resp, sent, gen)
			}
			if r.seq != 0 && r.err == "" && r.resp.Success {
				t.noteLogLocked(target, &r.resp, mine, sent)
			}
		})
		if err != nil {
			b.ok = false
			continue
		}
		b.posted, b.seq = sent, seq
	}
}

// keepalives runs the keepalives of every group on the node until the
// host closes.
func (h *heartbeats) keepalives() {
	tick := time.NewTicker(hbKeepEvery)
	defer tick.Stop()
	var ts []*groupTransport
	for {
		select {
		case <-h.stop:
			return
		case now := <-tick.C:
			ts = ts[:0]
			h.hmu.RLock()
			for _, t := range h.handlers {
				if t.keepFor > 0 {
					ts = append(ts, t)
				}
			}
			h.hmu.RUnlock()
			for _, t := range ts {
				t.keepalive(now)
			}
			clear(ts)
		}
	}
}
