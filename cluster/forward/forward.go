package forward

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/trident-broker/trident/cluster/forward/frame"
	"github.com/trident-broker/trident/exchange"
)

// Dialer opens a transport to a peer's forwarding Server (in production
// a cluster multiplexer stream named "fwd").
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// Locator says where a queue's messages live right now: the address to
// dial. It is called on the caller's goroutine by Publish, so it must be
// cheap and must not block (read the current leader or home node).
type Locator func() (addr string, err error)

// Errors reported to done callbacks and returned by Get, Purge and Count.
var (
	// ErrNacked: the owning node refused the message.
	ErrNacked = errors.New("forward: message refused by the owning node")
	// ErrConnectionLost: the connection to the owning node failed before
	// the outcome was known.
	ErrConnectionLost = errors.New("forward: connection to the owning node lost")
	// ErrUnsent: the owning node could not be reached, and the message
	// never left this node (it is joined with ErrConnectionLost). A
	// Remote keeps such a publish, with those waiting for the queue's
	// location, until the queue's owner can be reached or changes, for at
	// most unsentWait from its first failure (remote.go).
	ErrUnsent = errors.New("forward: owning node unreachable, message not sent")
	// ErrNotAppended: the owning node refused the message because the
	// queue's log never appended it (frame.ReasonNotAppended: its leader
	// was handing over). It is joined with ErrNacked. A Remote sends such
	// a publish to the queue's next owner (keepUnsent), for at most
	// notAppendedWait from its first refusal.
	ErrNotAppended = errors.New("forward: the owning node did not append the message (its leadership is changing)")
	// ErrTooManyHops: the message was forwarded MaxHops times already
	// (the nodes disagree for a moment about where its queue lives).
	ErrTooManyHops = errors.New("forward: message forwarded too many times")
	// ErrClosed: the Forwarder or Remote was closed.
	ErrClosed = errors.New("forward: closed")
	// ErrTimeout: a synchronous call (Get, Purge, Count) took too long.
	ErrTimeout = errors.New("forward: owning node did not answer in time")
	// ErrHeader: a header value the forwarding codec cannot carry.
	ErrHeader = errors.New("forward: header value cannot be forwarded")
	// ErrFailed: the owning node answered a Get, Purge or Count with an
	// error (the queue is not there, say); its text follows.
	ErrFailed = errors.New("forward: the owning node failed the call")
	// ErrVersion: the peer speaks another version of the protocol.
	ErrVersion = errors.New("forward: peer speaks another protocol version")
	// ErrProtocol: the peer sent a frame out of turn.
	ErrProtocol = errors.New("forward: protocol error")
)

const (
	// MaxPending bounds the publishes of one link and hop that are
	// queued or awaiting their confirm, and is the credit a Server grants
	// each hop of a connection. Past it a publisher waits for room, with
	// no core lock held (PublishPaced): that is the owning node's
	// back-pressure reaching the publisher.
	MaxPending = 10000
	// MaxHops is how many times a message may be forwarded on its way
	// to its queue: a quorum queue's proxy on a node outside its group
	// reaches a member (1), which reaches the leader (2), which may have
	// just handed over to another (3). A proxy refuses one more.
	MaxHops = frame.Hops
	// stuckAfter is how long a confirm may take before its connection is
	// given up (see conn.tick).
	stuckAfter = 30 * time.Second
	// callTimeout bounds Get, Purge, Count and dialling.
	callTimeout = 5 * time.Second
	// relocateEvery is how often a consumer asks its Locator whether the
	// queue moved.
	relocateEvery = 500 * time.Millisecond
	minBackoff    = 50 * time.Millisecond
	maxBackoff    = 5 * time.Second
	// heartbeat is how often a client pings; a connection on which
	// nothing was read for 3 heartbeats is dead.
	heartbeat = 10 * time.Second
)

// Forwarder holds the connections to peers' forwarding Servers and makes
// Remotes that use them.
type Forwarder struct {
	dial    Dialer
	log     *slog.Logger
	applied func() uint64 // the metadata index this node applied; nil: none sent
	// maxPending is each link's budget per hop: MaxPending (tests
	// change it before the first Remote).
	maxPending int
	// roomWait, when set (tests), replaces the roomWait deadline.
	roomWait time.Duration

	mu      sync.Mutex
	links   map[string]*link
	remotes map[*remote]struct{}
	closed  bool
}

// New makes a Forwarder; it connects to nothing until used.
func New(dial Dialer, log *slog.Logger) *Forwarder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Forwarder{dial: dial, log: log.With("component", "forward"), maxPending: MaxPending,
		links: map[string]*link{}, remotes: map[*remote]struct{}{}}
}

// SetMetaIndex gives the Forwarder the index of the metadata log this
// node has applied. Until the owning node has confirmed a first publish
// of a Remote, the Remote's publishes carry it (frame.Publish.Meta), and
// the owner routes them only once it has applied as much: a queue
// declared a moment ago, which this node already knows, is then there
// too. Call before the first Remote.
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
	f.links = map[string]*link{}
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

// link returns the link to addr, or nil once closed.
func (f *Forwarder) link(addr string) *link {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	l := f.links[addr]
	if l == nil {
		l = newLink(f, addr)
		f.links[addr] = l
	}
	return l
}

// link is the connection to one peer, for every vhost, opened lazily and
// reopened lazily (with backoff) after it is lost. Its publisher sends
// every Remote's publishes to that peer.
type link struct {
	f    *Forwarder
	addr string
	log  *slog.Logger
	pub  *publisher

	mu      sync.Mutex // held while dialling: one dial at a time
	cur     *conn
	closed  bool
	retryAt time.Time // no dial before this, after a failure
	backoff time.Duration
	gen     uint32 // of the last connection made
}

func newLink(f *Forwarder, addr string) *link {
	l := &link{f: f, addr: addr, log: f.log.With("peer", addr)}
	l.pub = newPublisher(l)
	return l
}

// connection returns the open connection, dialling if there is none and
// the backoff after the last failure has passed.
func (l *link) connection() (*conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if l.cur != nil && !l.cur.isDead() {
		return l.cur, nil
	}
	if time.Until(l.retryAt) > 0 {
		return nil, ErrConnectionLost
	}
	l.gen++
	c, err := dialConn(l, l.gen)
	if err != nil {
		l.backoff = min(max(2*l.backoff, minBackoff), maxBackoff)
		l.retryAt = time.Now().Add(l.backoff)
		if errors.Is(err, ErrVersion) {
			l.log.Error("cannot forward to peer", "err", err, "retry_in", l.backoff)
		} else {
			l.log.Warn("cannot connect to peer", "err", err, "retry_in", l.backoff)
		}
		return nil, errors.Join(ErrConnectionLost, err)
	}
	l.backoff = 0
	l.cur = c
	l.log.Debug("connected to peer")
	return c, nil
}

func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	c := l.cur
	l.cur = nil
	l.mu.Unlock()
	l.pub.close()
	if c != nil {
		c.shut(ErrClosed)
	}
}
