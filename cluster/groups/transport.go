package groups

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// groupTransport is a group's raft transport: its own
// raft.NetworkTransport on the group's mux stream for everything but
// heartbeats, which go through the host's coalesced heartbeats.
type groupTransport struct {
	*raft.NetworkTransport
	hb    *heartbeats
	group string
	// keepFor, if not zero: the node keeps raft's latest heartbeat to
	// each follower going every hbKeepEvery for as long (after raft last
	// sent it), and raft's heartbeats are answered from the keepalives'
	// answers (keepalive.go).
	keepFor time.Duration

	mu    sync.Mutex
	fn    func(raft.RPC)
	beats map[raft.ServerAddress]*hbBeat // if keepFor > 0
	// logs: how far behind this member's log each follower was, as its
	// latest successful answer to an AppendEntries or a heartbeat (a
	// keepalive's included) reported (FollowerLag).
	logs map[raft.ServerAddress]followerLog
	// r is the group's raft, once it runs: its last index when a request
	// goes is what a follower's answer is measured against.
	r atomic.Pointer[raft.Raft]
}

// followerLog is how many entries a follower's log lacked, of those this
// member's held when it sent a request, and when it sent it.
type followerLog struct {
	lag uint64
	at  time.Time
}

// lastIndex is this member's last log index (0 before its raft runs).
func (t *groupTransport) lastIndex() uint64 {
	if r := t.r.Load(); r != nil {
		return r.LastIndex()
	}
	return 0
}

// noteLog records a follower's answer to a request sent at, when this
// member's last log index was mine.
func (t *groupTransport) noteLog(target raft.ServerAddress, resp *raft.AppendEntriesResponse, mine uint64, at time.Time) {
	t.mu.Lock()
	t.noteLogLocked(target, resp, mine, at)
	t.mu.Unlock()
}

func (t *groupTransport) noteLogLocked(target raft.ServerAddress, resp *raft.AppendEntriesResponse, mine uint64, at time.Time) {
	if t.logs == nil {
		t.logs = map[raft.ServerAddress]followerLog{}
	}
	var lag uint64
	if mine > resp.LastLog {
		lag = mine - resp.LastLog
	}
	if cur, ok := t.logs[target]; !ok || !at.Before(cur.at) {
		t.logs[target] = followerLog{lag: lag, at: at}
	}
}

// followerLog returns what noteLog recorded for target.
func (t *groupTransport) followerLog(target raft.ServerAddress) (followerLog, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.logs[target]
	return l, ok
}

func newGroupTransport(inner *raft.NetworkTransport, hb *heartbeats, group string, keepFor time.Duration) *groupTransport {
	t := &groupTransport{NetworkTransport: inner, hb: hb, group: group, keepFor: keepFor, beats: map[raft.ServerAddress]*hbBeat{}}
	hb.hmu.Lock()
	hb.handlers[group] = t
	hb.hmu.Unlock()
	return t
}

// AppendEntries implements raft.Transport.
func (t *groupTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	at, mine := time.Now(), t.lastIndex()
	var err error
	switch {
	case !isHeartbeat(args):
		err = t.NetworkTransport.AppendEntries(id, target, args, resp)
	case t.keepFor > 0:
		return t.heartbeat(target, args, resp) // notes the answers it gets
	default:
		err = t.hb.send(string(target), t.group, args, resp)
	}
	if err == nil && resp.Success {
		t.noteLog(target, resp, mine, at)
	}
	return err
}

// SetHeartbeatHandler implements raft.Transport.
func (t *groupTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	t.mu.Lock()
	t.fn = cb
	t.mu.Unlock()
	t.NetworkTransport.SetHeartbeatHandler(cb)
}

func (t *groupTransport) heartbeatFn() func(raft.RPC) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fn
}

// Close implements raft.WithClose: the group no longer answers
// heartbeats here.
func (t *groupTransport) Close() error {
	t.hb.hmu.Lock()
	if t.hb.handlers[t.group] == t {
		delete(t.hb.handlers, t.group)
	}
	t.hb.hmu.Unlock()
	t.mu.Lock()
	clear(t.beats) // no keepalive after this, even from a round under way
	t.mu.Unlock()
	return t.NetworkTransport.Close()
}
