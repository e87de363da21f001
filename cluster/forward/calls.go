package forward

import (
	"fmt"
	"time"

	"github.com/trident-broker/trident/cluster/forward/frame"
	"github.com/trident-broker/trident/exchange"
)

// Get, Purge and Count: calls that wait for the owning node's answer, on
// the caller's goroutine (the core calls them without locks), for at most
// callTimeout, dialling included; a connection that does not answer in
// time is dropped.

// Get implements exchange.Remote. An unacked message stays the
// connection's until settled: the owning node requeues it if the
// connection ends, and its tag (of that connection's generation) is dead.
func (r *remote) Get(noAck bool) (m *exchange.Message, tag uint64, redelivered bool, remaining int, ok bool, err error) {
	r.getMu.Lock()
	defer r.getMu.Unlock()
	deadline := time.Now().Add(callTimeout)
	c, err := r.conn()
	if err != nil {
		return nil, 0, false, 0, false, err
	}
	f, err := c.call(func(req uint64) frame.Frame {
		return &frame.Get{Req: req, VHost: r.vhost, Queue: r.queue, NoAck: noAck}
	}, deadline)
	if err != nil {
		return nil, 0, false, 0, false, err
	}
	switch f := f.(type) {
	case *frame.GetOK:
		if !noAck {
			r.mu.Lock()
			r.getConn = c
			r.mu.Unlock()
			tag = makeTag(true, c.gen, f.Delivery)
		}
		return toCore(&f.Msg), tag, f.Redelivered, int(f.Remaining), true, nil
	case *frame.Result:
		if f.Err != "" {
			return nil, 0, false, 0, false, fmt.Errorf("%w: %s", ErrFailed, f.Err)
		}
		return nil, 0, false, 0, false, nil
	}
	return nil, 0, false, 0, false, ErrProtocol
}

// Purge implements exchange.Remote.
func (r *remote) Purge() (int, error) {
	a, _, err := r.result(func(req uint64) frame.Frame {
		return &frame.Purge{Req: req, VHost: r.vhost, Queue: r.queue}
	})
	return int(a), err
}

// Count implements exchange.Remote (what a passive queue.declare says).
func (r *remote) Count() (messages, consumers int, err error) {
	a, b, err := r.result(func(req uint64) frame.Frame {
		return &frame.Count{Req: req, VHost: r.vhost, Queue: r.queue}
	})
	return int(a), int(b), err
}

func (r *remote) result(mk func(req uint64) frame.Frame) (a, b uint64, err error) {
	deadline := time.Now().Add(callTimeout)
	c, err := r.conn()
	if err != nil {
		return 0, 0, err
	}
	f, err := c.call(mk, deadline)
	if err != nil {
		return 0, 0, err
	}
	res, ok := f.(*frame.Result)
	if !ok {
		return 0, 0, ErrProtocol
	}
	if res.Err != "" {
		return 0, 0, fmt.Errorf("%w: %s", ErrFailed, res.Err)
	}
	return res.A, res.B, nil
}

// conn is the connection to where the queue is now.
func (r *remote) conn() (*conn, error) {
	addr, err := r.locate()
	if err != nil {
		return nil, err
	}
	l := r.f.link(addr)
	if l == nil {
		return nil, ErrClosed
	}
	return l.connection()
}
