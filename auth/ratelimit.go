package auth

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Defaults of Options.FailedLoginLimit and Options.FailedLoginBackoff.
const (
	DefaultFailedLoginLimit   = 10
	DefaultFailedLoginBackoff = 30 * time.Second
)

// maxLimiterEntries bounds the limiter's memory: beyond it, addresses whose
// bucket is full again are forgotten, and if that is not enough the whole
// table is reset (an attacker with that many addresses gains little).
const maxLimiterEntries = 65536

// limiter is a token bucket of failed logins per source address. A bucket
// holds up to limit tokens and refills at limit tokens per backoff; each
// failed login takes one. When a failure empties it, the address is blocked
// for backoff: Authenticate refuses it without looking at the password;
// when the back-off ends the bucket is full again. So an address gets at
// most about limit tries per backoff. Successful logins take no token. IPv6 addresses are grouped by /64.
type limiter struct {
	limit   float64
	backoff time.Duration
	now     func() time.Time

	mu sync.Mutex
	m  map[netip.Addr]*bucket
}

type bucket struct {
	tokens       float64
	last         time.Time // of the last refill
	blockedUntil time.Time
}

func newLimiter(limit int, backoff time.Duration) *limiter {
	if limit <= 0 {
		return nil
	}
	if backoff <= 0 {
		backoff = DefaultFailedLoginBackoff
	}
	return &limiter{limit: float64(limit), backoff: backoff, now: time.Now, m: map[netip.Addr]*bucket{}}
}

// limitKey is the address a remote is counted under: the IP (IPv4-mapped
// addresses unmapped), an IPv6 address's /64, or the zero Addr for a
// remote without IP (nil, Unix socket).
func limitKey(remote net.Addr) netip.Addr {
	var ip netip.Addr
	switch a := remote.(type) {
	case nil:
		return ip
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.IPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		if ap, err := netip.ParseAddrPort(remote.String()); err == nil {
			ip = ap.Addr()
		}
	}
	ip = ip.Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			ip = p.Addr()
		}
	}
	return ip
}

// blocked reports whether key is in its back-off period, and until when.
func (l *limiter) blocked(key netip.Addr) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[key]
	if b == nil {
		return time.Time{}, false
	}
	now := l.now()
	if now.Before(b.blockedUntil) {
		return b.blockedUntil, true
	}
	return time.Time{}, false
}

// fail records a failed login from key and reports whether key is now
// blocked.
func (l *limiter) fail(key netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.m[key]
	if b == nil {
		if len(l.m) >= maxLimiterEntries {
			l.prune(now)
		}
		b = &bucket{tokens: l.limit, last: now}
		l.m[key] = b
	}
	l.refill(b, now)
	b.tokens--
	if b.tokens < 1 {
		b.blockedUntil = now.Add(l.backoff)
		b.tokens = l.limit // a fresh allowance when the back-off ends
		b.last = b.blockedUntil
		return true
	}
	return false
}

func (l *limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens += l.limit * float64(d) / float64(l.backoff)
		if b.tokens > l.limit {
			b.tokens = l.limit
		}
		b.last = now
	}
}

// prune forgets addresses with a full bucket; if none, it forgets all.
func (l *limiter) prune(now time.Time) {
	for k, b := range l.m {
		if now.Before(b.blockedUntil) {
			continue
		}
		l.refill(b, now)
		if b.tokens >= l.limit {
			delete(l.m, k)
		}
	}
	if len(l.m) >= maxLimiterEntries {
		clear(l.m)
	}
}
