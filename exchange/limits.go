package exchange

import (
	"sync"
	"sync/atomic"
	"time"
)

// Limits bounds what clients may use across every protocol. A zero field
// means no limit, RabbitMQ's default for each.
type Limits struct {
	// MaxConnectionsPerUser and MaxConnectionsPerVHost bound open
	// connections (RabbitMQ's user and vhost limit max-connections).
	MaxConnectionsPerUser  int
	MaxConnectionsPerVHost int
	// MaxQueuesPerVHost bounds a vhost's queues (vhost limit max-queues).
	MaxQueuesPerVHost int
	// PublishRatePerUser and PublishRatePerVHost bound the messages per
	// second published by one user and to one vhost; each is a token
	// bucket holding one second's worth.
	PublishRatePerUser  int
	PublishRatePerVHost int
}

// Limiter enforces Limits. Front ends call OpenConnection once a client is
// authenticated and WaitPublish before each publish; the core checks the
// queue limit itself. It is safe for concurrent use.
type Limiter struct {
	anyRate  atomic.Bool // the per-publish check
	maxQueue atomic.Int64

	mu     sync.Mutex
	lim    Limits
	byUser map[string]int
	byVH   map[string]int
	userTB map[string]*tokenBucket
	vhTB   map[string]*tokenBucket
}

func newLimiter() *Limiter {
	return &Limiter{byUser: map[string]int{}, byVH: map[string]int{},
		userTB: map[string]*tokenBucket{}, vhTB: map[string]*tokenBucket{}}
}

// Set replaces the limits. Connections already open stay open; rate
// buckets restart full.
func (l *Limiter) Set(lim Limits) {
	l.mu.Lock()
	l.lim = lim
	l.userTB = map[string]*tokenBucket{}
	l.vhTB = map[string]*tokenBucket{}
	l.mu.Unlock()
	l.maxQueue.Store(int64(lim.MaxQueuesPerVHost))
	l.anyRate.Store(lim.PublishRatePerUser > 0 || lim.PublishRatePerVHost > 0)
}

// Limits returns the limits in force.
func (l *Limiter) Limits() Limits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lim
}

// OpenConnection counts a new connection of user to vhost. It fails with
// a KindNotAllowed *Error when a connection limit is reached; otherwise
// the caller must call release (once) when the connection closes.
func (l *Limiter) OpenConnection(user, vhost string) (release func(), err error) {
	if err := l.AdmitConnection(user, vhost); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { l.ReleaseConnection(user, vhost) }) }, nil
}

// AdmitConnection is OpenConnection for a caller that keeps user and
// vhost and calls ReleaseConnection(user, vhost) exactly once when the
// connection closes: it allocates nothing per connection (the closure
// and its sync.Once were 64 bytes of every MQTT device).
func (l *Limiter) AdmitConnection(user, vhost string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.lim.MaxConnectionsPerVHost; m > 0 && l.byVH[vhost] >= m {
		return errorf(KindNotAllowed, "access to vhost '%s' refused for user '%s': connection limit (%d) is reached", vhost, user, m)
	}
	if m := l.lim.MaxConnectionsPerUser; m > 0 && l.byUser[user] >= m {
		return errorf(KindNotAllowed, "Connection refused for user '%s'. User connection limit (%d) is reached", user, m)
	}
	l.byVH[vhost]++
	l.byUser[user]++
	return nil
}

// ReleaseConnection gives back the slot AdmitConnection took.
func (l *Limiter) ReleaseConnection(user, vhost string) {
	l.mu.Lock()
	decCount(l.byVH, vhost)
	decCount(l.byUser, user)
	l.mu.Unlock()
}

func decCount(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}

// Connections returns the open connections counted for user and vhost.
func (l *Limiter) Connections(user, vhost string) (perUser, perVHost int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byUser[user], l.byVH[vhost]
}

// RateLimited reports whether a publish rate limit is set (one atomic load).
func (l *Limiter) RateLimited() bool { return l.anyRate.Load() }

// WaitPublish blocks until user may publish one message to vhost under
// the publish rate limits, or abort is closed (then it returns false).
// Without rate limits it costs one atomic load. Front ends call it from
// their reader, so a publisher over its rate is slowed by TCP flow
// control, never by dropping a message.
func (l *Limiter) WaitPublish(user, vhost string, abort <-chan struct{}) bool {
	if !l.anyRate.Load() {
		return true
	}
	now := time.Now()
	l.mu.Lock()
	var wait time.Duration
	if r := l.lim.PublishRatePerUser; r > 0 {
		wait = max(wait, bucket(l.userTB, user, r, now).take(now))
	}
	if r := l.lim.PublishRatePerVHost; r > 0 {
		wait = max(wait, bucket(l.vhTB, vhost, r, now).take(now))
	}
	l.mu.Unlock()
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-abort:
		return false
	}
}

func bucket(m map[string]*tokenBucket, k string, rate int, now time.Time) *tokenBucket {
	b := m[k]
	if b == nil {
		b = &tokenBucket{rate: float64(rate), tokens: float64(rate), last: now}
		m[k] = b
	}
	return b
}

// tokenBucket refills at rate tokens per second up to rate tokens. take
// reserves one token, going into debt if none is left, and returns how
// long the caller must wait for its token.
type tokenBucket struct {
	rate   float64
	tokens float64
	last   time.Time
}

func (b *tokenBucket) take(now time.Time) time.Duration {
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(b.rate, b.tokens+el*b.rate)
		b.last = now
	}
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}
