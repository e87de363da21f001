package mux

import (
	"net"
	"time"
)

// inKey is the refusal key of an accepted connection from remote that
// claims the advertised address peer (several nodes may share a host).
func inKey(remote net.Addr, peer string) string {
	host := remote.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return "in " + host + " " + peer
}

// refusalLogEvery is how often a refusal of one peer is logged at
// WARN; the others in between go to DEBUG, so that a node retrying every
// second does not flood the log, nor a scanner.
const refusalLogEvery = time.Minute

// maxRefusalKeys bounds the peers remembered for refusalLogEvery.
const maxRefusalKeys = 1024

// warnRefused logs a refused peer at WARN at most once per
// refusalLogEvery per key (a direction and a peer), else at DEBUG.
func (m *Mux) warnRefused(key string, msg string, args ...any) {
	now := time.Now()
	m.refusedMu.Lock()
	last, seen := m.refused[key]
	warn := !seen || now.Sub(last) >= refusalLogEvery
	if warn {
		if len(m.refused) >= maxRefusalKeys {
			clear(m.refused)
		}
		m.refused[key] = now
	}
	m.refusedMu.Unlock()
	if warn {
		m.log.Warn(msg, args...)
	} else {
		m.log.Debug(msg, args...)
	}
}
