package logbridge

import (
	"sync"
	"time"
)

// A peer that is down makes Raft retry its heartbeats and appends every
// few tens of milliseconds, and memberlist its probes and push/pulls: each
// retry is one error line, about 120 in 25 s for one dead peer. An
// operator wants one line when a peer goes down and one when it is back.
// peerLimiter keeps, per peer, whether it is failing: the first failure is
// logged (at WARN), the next ones are logged at DEBUG only, with a WARN
// summary carrying their count once per ReportEvery while they go on; a
// success (Raft's "pipelining replication" to that peer) ends the episode
// with one INFO line. A peer that stops failing without a success line
// (memberlist logs none) starts a new episode after ReportEvery of
// silence.

// ReportEvery is how often a peer that keeps failing is reported again.
const ReportEvery = time.Minute

type peerLimiter struct {
	mu    sync.Mutex
	every time.Duration
	now   func() time.Time
	alias map[string]string // Raft server address → server ID, learnt from raft.Server values
	down  map[string]*peerDown
}

type peerDown struct {
	since      time.Time // first failure of the episode
	last       time.Time // last failure
	reported   time.Time // last failure logged at WARN
	suppressed int       // failures not logged at WARN since reported
}

func newPeerLimiter() *peerLimiter {
	return &peerLimiter{every: ReportEvery, now: time.Now, alias: map[string]string{}, down: map[string]*peerDown{}}
}

// failure records a failure about peer. It reports whether to log it at
// WARN, how many failures were not since the last WARN line, and when the
// episode started.
func (p *peerLimiter) failure(peer string) (report bool, suppressed int, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	d := p.down[peer]
	if d == nil || now.Sub(d.last) >= p.every {
		p.down[peer] = &peerDown{since: now, last: now, reported: now}
		return true, 0, now
	}
	d.last = now
	if now.Sub(d.reported) < p.every {
		d.suppressed++
		return false, 0, d.since
	}
	n := d.suppressed
	d.reported, d.suppressed = now, 0
	return true, n, d.since
}

// success ends peer's failure episode. It reports whether there was one,
// the failures not logged at WARN, and when it started.
func (p *peerLimiter) success(peer string) (was bool, suppressed int, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.down[peer]
	if d == nil {
		return false, 0, time.Time{}
	}
	delete(p.down, peer)
	return true, d.suppressed, d.since
}

// forget drops peer (removed from the configuration).
func (p *peerLimiter) forget(peer string) {
	p.mu.Lock()
	delete(p.down, peer)
	p.mu.Unlock()
}

// learn records that a Raft server address belongs to a server ID, so
// that lines naming either count for one peer.
func (p *peerLimiter) learn(addr, id string) {
	if addr == "" || id == "" || addr == id {
		return
	}
	p.mu.Lock()
	if len(p.alias) < 4096 {
		p.alias[addr] = id
	}
	p.mu.Unlock()
}

func (p *peerLimiter) resolve(addr string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.alias[addr]; ok {
		return id
	}
	return addr
}
