package groups

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/mux"
)

// HeartbeatStream is the mux stream that carries the coalesced heartbeats
// of every group of a node (doc.go, "Many groups").
const HeartbeatStream = "raft-hb"

const (
	// hbLinger is how long a peer's sender gathers heartbeats before it
	// writes them, all in one write: heartbeats are sent every 100-200 ms
	// per group and follower and a leader's lease is 500 ms, so 10 ms
	// more cost nothing, and with a thousand groups they gather a few
	// dozen heartbeats per write.
	hbLinger = 10 * time.Millisecond
	// hbTimeout bounds a heartbeat's round trip, a dial and a write.
	hbTimeout = 5 * time.Second
)

// Errors of the coalesced heartbeats.
var (
	// errHBClosed: the host closed, or the peer's connection failed
	// with the heartbeat in flight.
	errHBClosed = errors.New("groups: heartbeat connection closed")
	// errHBTimeout: no answer within hbTimeout.
	errHBTimeout = errors.New("groups: heartbeat timed out")
)

// heartbeats sends the raft heartbeats of all the node's groups to each
// peer over one connection, gathered into one write per hbLinger, and
// answers the peers' heartbeats by calling each group's raft heartbeat
// handler straight from the connection's reader.
type heartbeats struct {
	mux *mux.Mux
	log *slog.Logger

	served atomic.Uint64 // heartbeats answered here

	// handlers: group name → its transport here. A plain map: it is
	// read for every heartbeat answered, written when a group starts or
	// stops (a sync.Map's lookup cost ~3 µs here, a third of answering).
	hmu      sync.RWMutex
	handlers map[string]*groupTransport

	mu       sync.Mutex
	closed   bool
	ln       net.Listener
	peers    map[string]*hbPeer
	accepted map[net.Conn]struct{}
	stop     chan struct{} // closed by close: the keepalive loop ends

	// down, if set, is told the advertised address of a node whose
	// process is gone (peerdown.go). Set before listen.
	down func(addr string)
}

func newHeartbeats(m *mux.Mux, log *slog.Logger) *heartbeats {
	return &heartbeats{mux: m, log: log, peers: map[string]*hbPeer{}, accepted: map[net.Conn]struct{}{}, stop: make(chan struct{}), handlers: map[string]*groupTransport{}}
}

// listen registers the heartbeat stream on the mux, once.
func (h *heartbeats) listen() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ln != nil || h.closed {
		return nil
	}
	ln, err := h.mux.Listener(HeartbeatStream)
	if err != nil {
		return err
	}
	h.ln = ln
	go h.accept(ln)
	go h.keepalives()
	return nil
}

func (h *heartbeats) close() {
	h.mu.Lock()
	if !h.closed {
		close(h.stop)
	}
	h.closed = true
	ln, peers, acc := h.ln, h.peers, h.accepted
	h.peers, h.accepted = map[string]*hbPeer{}, map[net.Conn]struct{}{}
	h.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, p := range peers {
		p.close()
	}
	for c := range acc {
		c.Close()
	}
}

// send is groupTransport.AppendEntries for a heartbeat.
func (h *heartbeats) send(addr, group string, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	p, err := h.peer(addr)
	if err != nil {
		return err
	}
	return p.send(group, req, resp)
}

// send is heartbeats.send over p.
func (p *hbPeer) send(group string, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	r, err := p.roundTrip(group, req)
	if err != nil {
		return err
	}
	if r.err != "" {
		return errors.New(r.err)
	}
	*resp = r.resp
	return nil
}

func (h *heartbeats) peer(addr string) (*hbPeer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errHBClosed
	}
	p := h.peers[addr]
	if p == nil {
		p = &hbPeer{h: h, addr: addr, pending: map[uint64]func(hbResp){}, kick: make(chan struct{}, 1), done: make(chan struct{})}
		h.peers[addr] = p
		go p.write()
	}
	return p, nil
}

// probe asks the node at addr whether group runs there (its raft is
// started): nil if it does.
func (h *heartbeats) probe(addr, group string) error {
	var resp raft.AppendEntriesResponse
	return h.send(addr, group, &raft.AppendEntriesRequest{}, &resp)
}

// hbPeer is the sending side towards one peer: a writer goroutine owns
// the connection (dialled when there is something to send) and a reader
// goroutine per connection hands the answers back.
type hbPeer struct {
	h    *heartbeats
	addr string
	kick chan struct{}
	done chan struct{}

	mu      sync.Mutex
	seq     uint64
	queue   []byte // requests not written yet
	pending map[uint64]func(hbResp)
	closed  bool
	conn    net.Conn // the writer's; set here so that close can close it

	// gen counts the connection's failures (failAll): an answer that
	// came over an older generation no longer stands for its follower
	// (keepalive.go).
	gen atomic.Uint64
}

func (p *hbPeer) roundTrip(group string, req *raft.AppendEntriesRequest) (hbResp, error) {
	ch := make(chan hbResp, 1)
	seq, err := p.post(group, req, func(r hbResp) { ch <- r })
	if err != nil {
		return hbResp{}, err
	}
	t := time.NewTimer(hbTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.seq == 0 {
			return hbResp{}, fmt.Errorf("%w: %s", errHBClosed, r.err)
		}
		return r, nil
	case <-t.C:
		p.cancel(seq)
		return hbResp{}, errHBTimeout
	}
}

// post queues req for the writer; done gets its answer (seq 0 and err
// if the connection failed first), called from the connection's reader
// or failAll, never under p.mu; it must not block.
func (p *hbPeer) post(group string, req *raft.AppendEntriesRequest, done func(hbResp)) (uint64, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, errHBClosed
	}
	p.seq++
	seq := p.seq
	q, err := appendHBReq(p.queue, &hbReq{seq: seq, group: group, req: *req})
	if err != nil {
		p.mu.Unlock()
		return 0, err
	}
	p.queue = q
	p.pending[seq] = done
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
	return seq, nil
}

// cancel forgets the answer to seq: its done is not called.
func (p *hbPeer) cancel(seq uint64) {
	p.mu.Lock()
	delete(p.pending, seq)
	p.mu.Unlock()
}

// failAll answers every pending heartbeat with err and drops the ones
// not written yet.
func (p *hbPeer) failAll(err error) {
	p.gen.Add(1)
	p.mu.Lock()
	pending := p.pending
	p.pending = map[uint64]func(hbResp){}
	p.queue = p.queue[:0]
	p.mu.Unlock()
	for _, done := range pending {
		done(hbResp{err: err.Error()}) // seq 0: failed
	}
}

func (p *hbPeer) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	c := p.conn
	p.mu.Unlock()
	close(p.done)
	if c != nil {
		c.Close()
	}
	p.failAll(errHBClosed)
}

// write is the peer's writer goroutine.
func (p *hbPeer) write() {
	var conn net.Conn
	var out []byte
	linger := time.NewTimer(0)
	<-linger.C
	for {
		select {
		case <-p.kick:
		case <-p.done:
			return
		}
		linger.Reset(hbLinger)
		select {
		case <-linger.C:
		case <-p.done:
			return
		}
		p.mu.Lock()
		out, p.queue = append(out[:0], p.queue...), p.queue[:0]
		p.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		if conn == nil {
			c, err := p.h.mux.Dial(p.addr, HeartbeatStream, hbTimeout)
			if err != nil {
				p.failAll(err)
				continue
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				c.Close()
				return
			}
			p.conn, conn = c, c
			p.mu.Unlock()
			go p.read(c)
		}
		_ = conn.SetWriteDeadline(time.Now().Add(hbTimeout))
		if _, err := conn.Write(out); err != nil {
			conn.Close()
			p.mu.Lock()
			if p.conn == conn {
				p.conn = nil
			}
			p.mu.Unlock()
			conn = nil
			p.failAll(err)
		}
	}
}

// read hands the answers read from c to their callers until c fails;
// then it closes c, so that the writer dials anew.
func (p *hbPeer) read(c net.Conn) {
	err := readFrames(c, func(kind byte, body []byte) error {
		if kind != hbResponse {
			return fmt.Errorf("%w: kind %d from a peer's answers", errHBFrame, kind)
		}
		r, err := decodeHBResp(body)
		if err != nil {
			return err
		}
		p.mu.Lock()
		done := p.pending[r.seq]
		delete(p.pending, r.seq)
		p.mu.Unlock()
		if done != nil {
			done(r)
		}
		return nil
	}, nil)
	c.Close()
	p.mu.Lock()
	if p.conn == c {
		p.conn = nil
	}
	closed := p.closed
	p.mu.Unlock()
	if !closed {
		if err == nil || errors.Is(err, io.EOF) {
			err = errHBClosed
		}
		p.failAll(err)
	}
}

// readFrames calls each for every frame read from c, and idle (if not
// nil) whenever it has handled all the frames read so far, until c or
// each fails.
func readFrames(c net.Conn, each func(kind byte, body []byte) error, idle func() error) error {
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		for {
			kind, body, used, ferr := splitHBFrame(buf)
			if ferr != nil {
				return ferr
			}
			if used == 0 {
				break
			}
			if err := each(kind, body); err != nil {
				return err
			}
			buf = buf[:copy(buf, buf[used:])]
		}
		if idle != nil {
			if err := idle(); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
	}
}

func (h *heartbeats) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			c.Close()
			return
		}
		h.accepted[c] = struct{}{}
		h.mu.Unlock()
		go h.serve(c)
	}
}

// serve answers the heartbeats that come in on c: each goes to its
// group's raft heartbeat handler at once, and the answers to all the
// heartbeats of one read go back in one write.
func (h *heartbeats) serve(c net.Conn) {
	defer func() {
		c.Close()
		h.mu.Lock()
		delete(h.accepted, c)
		h.mu.Unlock()
	}()
	var out []byte
	beats := false // a raft heartbeat came in on c (not only probes)
	respCh := make(chan raft.RPCResponse, 1)
	err := readFrames(c, func(kind byte, body []byte) error {
		if kind != hbRequest {
			return fmt.Errorf("%w: kind %d from a peer's heartbeats", errHBFrame, kind)
		}
		r, err := decodeHBReq(body)
		if err != nil {
			return err
		}
		beats = beats || r.req.Term != 0
		out = appendHBResp(out, h.handle(&r, respCh))
		return nil
	}, func() error {
		if len(out) == 0 {
			return nil
		}
		_ = c.SetWriteDeadline(time.Now().Add(hbTimeout))
		_, err := c.Write(out)
		out = out[:0]
		return err
	})
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		h.log.Debug("coalesced heartbeats from a peer ended", "err", err)
	}
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if beats && !closed {
		go h.lost(mux.PeerAddr(c))
	}
}

// handle runs one heartbeat through its group's raft heartbeat handler.
func (h *heartbeats) handle(r *hbReq, respCh chan raft.RPCResponse) *hbResp {
	out := &hbResp{seq: r.seq}
	h.hmu.RLock()
	t := h.handlers[r.group]
	h.hmu.RUnlock()
	var fn func(raft.RPC)
	if t != nil {
		fn = t.heartbeatFn()
	}
	if fn == nil {
		out.err = "group " + r.group + " not running here"
		return out
	}
	if r.req.Term == 0 {
		return out // a probe (no raft heartbeat has term 0): the group runs here
	}
	fn(raft.RPC{Command: &r.req, RespChan: respCh})
	h.served.Add(1)
	select {
	case resp := <-respCh: // raft answers a heartbeat before it returns
		if resp.Error != nil {
			out.err = resp.Error.Error()
		} else if ar, ok := resp.Response.(*raft.AppendEntriesResponse); ok {
			out.resp = *ar
		} else {
			out.err = "unexpected heartbeat response"
		}
	default: // it shuts down
		out.err = raft.ErrRaftShutdown.Error()
	}
	return out
}
