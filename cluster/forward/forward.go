package forward

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/exchange"
)

// Dialer opens a transport to a peer's internal AMQP listener (in
// production a cluster multiplexer stream named "amqp").
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// Locator says where a queue's messages live right now: the address to
// dial. It is called on the caller's goroutine by Publish, so it must be
// cheap and must not block (read the current leader or home node).
type Locator func() (addr string, err error)

// Errors reported to done callbacks and returned by Get, Purge and Count.
var (
	// ErrNacked: the owning node refused the message (basic.nack).
	ErrNacked = errors.New("forward: message refused by the owning node")
	// ErrConnectionLost: the connection or channel to the owning node
	// failed before the outcome was known.
	ErrConnectionLost = errors.New("forward: connection to the owning node lost")
	// ErrTooManyHops: the message was forwarded MaxHops times already
	// (the nodes disagree for a moment about where its queue lives).
	ErrTooManyHops = errors.New("forward: message forwarded too many times")
	// ErrClosed: the Forwarder or Remote was closed.
	ErrClosed = errors.New("forward: closed")
	// ErrTimeout: a synchronous call (Get, Purge, Count) took too long.
	ErrTimeout = errors.New("forward: owning node did not answer in time")
	// ErrHeader: a header value AMQP cannot carry.
	ErrHeader = errors.New("forward: header value not representable in AMQP")
)

const (
	// MaxPending bounds the publishes of one (peer, vhost) link that are
	// queued or awaiting their confirm. Publish blocks while it is
	// reached: that is the owning node's back-pressure reaching the core.
	MaxPending = 10000
	// MaxHops is how many times a message may be forwarded on its way
	// to its queue: a quorum queue's proxy on a node outside its group
	// reaches a member (1), which reaches the leader (2), which may have
	// just handed over to another (3). A proxy refuses one more.
	MaxHops = 3
	// stuckAfter is how long a confirm may take before its channel is
	// given up (see confirmChan.listen).
	stuckAfter = 30 * time.Second
	// callTimeout bounds Get, Purge, Count and dialling.
	callTimeout = 5 * time.Second
	// relocateEvery is how often a consumer asks its Locator whether the
	// queue moved.
	relocateEvery = 500 * time.Millisecond
	minBackoff    = 50 * time.Millisecond
	maxBackoff    = 5 * time.Second
	// heartbeat detects a dead peer whose transport stays open.
	heartbeat = 10 * time.Second
)

// Forwarder holds the connections to peers' internal AMQP listeners and
// makes Remotes that use them.
type Forwarder struct {
	dial    Dialer
	log     *slog.Logger
	applied func() uint64 // the metadata index this node applied; nil: none sent

	mu      sync.Mutex
	links   map[linkKey]*link
	remotes map[*remote]struct{}
	closed  bool
}

// New makes a Forwarder; it connects to nothing until used.
func New(dial Dialer, log *slog.Logger) *Forwarder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Forwarder{dial: dial, log: log.With("component", "forward"),
		links: map[linkKey]*link{}, remotes: map[*remote]struct{}{}}
}

// SetMetaIndex gives the Forwarder the index of the metadata log this
// node has applied. Until the owning node has confirmed a first publish
// of a Remote, the Remote's publishes carry it
// (exchange.ForwardMetaIndexHeader), and the owner routes them only once
// it has applied as much: a queue declared a moment ago, which this node
// already knows, is then there too. Call before the first Remote.
func (f *Forwarder) SetMetaIndex(applied func() uint64) { f.applied = applied }

// Remote returns an exchange.Remote for queue in vhost, whose owning node
// locate finds.
func (f *Forwarder) Remote(vhost, queue string, locate Locator) exchange.Remote {
	r := newRemote(f, vhost, queue, locate)
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		r.Close()
		return r
	}
	f.remotes[r] = struct{}{}
	f.mu.Unlock()
	return r
}

// Close closes every Remote and connection; pending publishes fail with
// ErrClosed.
func (f *Forwarder) Close() {
	f.mu.Lock()
	f.closed = true
	rs := make([]*remote, 0, len(f.remotes))
	for r := range f.remotes {
		rs = append(rs, r)
	}
	ls := make([]*link, 0, len(f.links))
	for _, l := range f.links {
		ls = append(ls, l)
	}
	f.links = map[linkKey]*link{}
	f.mu.Unlock()
	for _, r := range rs {
		r.Close()
	}
	for _, r := range rs {
		r.wait()
	}
	for _, l := range ls {
		l.close()
	}
}

func (f *Forwarder) forget(r *remote) {
	f.mu.Lock()
	delete(f.remotes, r)
	f.mu.Unlock()
}

// link returns the link to addr for vhost, or nil once closed.
func (f *Forwarder) link(addr, vhost string) *link {
	k := linkKey{addr, vhost}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	l := f.links[k]
	if l == nil {
		l = newLink(f, k)
		f.links[k] = l
	}
	return l
}

// linkKey names a link: amqp091 connections are bound to one vhost.
type linkKey struct{ addr, vhost string }

// link is one peer connection for one vhost, opened lazily and reopened
// lazily (with backoff) after it is lost. It carries the shared confirm
// channel that every Remote of the link publishes through.
type link struct {
	f   *Forwarder
	key linkKey
	log *slog.Logger
	pub *publisher

	mu      sync.Mutex // held while dialling: one dial at a time
	conn    *amqp.Connection
	nc      net.Conn // conn's transport, closed to drop a peer at once
	closed  bool
	retryAt time.Time // no dial before this, after a failure
	backoff time.Duration

	ctlMu sync.Mutex    // serializes control calls
	ctl   *amqp.Channel // for Purge and Count; reopened after an error
}

func newLink(f *Forwarder, k linkKey) *link {
	l := &link{f: f, key: k, log: f.log.With("peer", k.addr, "vhost", k.vhost)}
	l.pub = newPublisher(l)
	return l
}

// connection returns the open connection, dialling if there is none and
// the backoff after the last failure has passed.
func (l *link) connection() (*amqp.Connection, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if l.conn != nil && !l.conn.IsClosed() {
		return l.conn, nil
	}
	if wait := time.Until(l.retryAt); wait > 0 {
		return nil, ErrConnectionLost
	}
	c, nc, err := l.dial()
	if err != nil {
		l.backoff = min(max(2*l.backoff, minBackoff), maxBackoff)
		l.retryAt = time.Now().Add(l.backoff)
		l.log.Warn("cannot connect to peer", "err", err, "retry_in", l.backoff)
		return nil, errors.Join(ErrConnectionLost, err)
	}
	l.backoff = 0
	l.conn, l.nc = c, nc
	l.log.Debug("connected to peer")
	return c, nil
}

func (l *link) dial() (*amqp.Connection, net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	nc, err := l.f.dial(ctx, l.key.addr)
	if err != nil {
		return nil, nil, err
	}
	nc = newCoalescingConn(nc)
	// amqp091-go clears the deadline once the handshake is done.
	_ = nc.SetDeadline(time.Now().Add(callTimeout))
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("trident-forward " + l.key.vhost)
	c, err := amqp.Open(nc, amqp.Config{
		SASL:       []amqp.Authentication{&amqp.PlainAuth{Username: "cluster-internal", Password: "cluster-internal"}},
		Vhost:      l.key.vhost,
		ChannelMax: 65535,
		Heartbeat:  heartbeat,
		Properties: props,
	})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc, nil
}

// control runs fn on the link's control channel, opening it if needed; a
// channel fn failed on is dropped (AMQP closes a channel on any error).
// It gives up after callTimeout.
func (l *link) control(fn func(ch *amqp.Channel) error) error {
	return withTimeout(func() error {
		l.ctlMu.Lock()
		defer l.ctlMu.Unlock()
		if l.ctl == nil || l.ctl.IsClosed() {
			c, err := l.connection()
			if err != nil {
				return err
			}
			if l.ctl, err = c.Channel(); err != nil {
				l.ctl = nil
				return errors.Join(ErrConnectionLost, err)
			}
		}
		err := fn(l.ctl)
		if err != nil {
			_ = l.ctl.Close()
			l.ctl = nil
		}
		return err
	}, l.dropConn) // closing the connection fails every call on it

}

// dropConn closes the current connection's transport at once (a peer
// that does not answer): every call and channel on it fails.
func (l *link) dropConn() {
	l.mu.Lock()
	nc := l.nc
	l.conn, l.nc = nil, nil
	l.mu.Unlock()
	if nc != nil {
		_ = nc.Close()
	}
}

func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	c, nc := l.conn, l.nc
	l.conn, l.nc = nil, nil
	l.mu.Unlock()
	l.pub.close()
	if c != nil {
		_ = c.CloseDeadline(time.Now().Add(time.Second))
		_ = nc.Close()
	}
}

// withTimeout runs fn, and gives up on it after callTimeout, calling
// abort to make it return.
func withTimeout(fn func() error, abort func()) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	t := time.NewTimer(callTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		go abort() // may wait for a dial in progress
		return ErrTimeout
	}
}
