package mqtt

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/mochi-mqtt/server/v2/packets"
)

// poller is the event loop that idle connections wait in: a connection
// whose socket is empty registers its descriptor here (one-shot) and its
// reader goroutine returns, so an idle connection holds no goroutine and
// no stack. When input arrives (or the peer hangs up) the loop starts a
// goroutine that reads on (conn.readOn), unless what arrived is only
// PINGREQs, which it answers itself (pingfast_linux.go). The loop is one
// goroutine and epoll descriptor per processor the runtime uses (at most
// maxPollLoops), a connection in the one its slot falls to, so that the
// PINGREQs of a fleet are answered on every processor; the descriptor
// stays registered with the runtime's own poller too, which the
// connection's writes and its reads in the middle of a packet use.
type poller struct {
	loops   []*pollLoop
	running atomic.Int32 // loops not yet stopped; the last closes the descriptors
	wakeR   int          // the read end of a pipe, to stop the loops
	wakeW   int

	mu sync.Mutex
	// slots holds the connections by id: an id is a slot's index + 1 in
	// its low 32 bits and the slot's generation in its high ones, so that
	// an event for a forgotten id (a descriptor closed with an event
	// already queued) finds another generation, not the slot's next
	// connection. A map of ids was ~57 bytes a connection, a slot is 16.
	slots  []pollSlot
	free   []uint32 // indexes of free slots
	closed bool
}

// maxPollLoops bounds the poller's loops.
const maxPollLoops = 8

// pollLoop is one of the poller's loops: its epoll descriptor and its own
// state (pingfast_linux.go), shared by its connections: the bytes it
// reads from a socket that woke, the PINGRESPs it writes, and its read
// and write callbacks (made once) with their results.
type pollLoop struct {
	p               *poller
	epfd            int
	rbuf            [pingReadSize]byte
	wbuf            [pingReadSize]byte
	wlen            int // wbuf[:wlen] is to be written
	readFn, writeFn func(fd uintptr) bool
	directFn        func(p []byte) (int, error) // l.direct, for Output.WriteAround
	rc              syscall.RawConn             // the socket directFn writes to
	n               int                         // bytes read or written
	errno           error
	acks            []loopAck // loopAcks' scratch
	seqs            []uint64
}

type pollSlot struct {
	c   *conn
	gen uint32
}

const pollEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

func newPoller() (*poller, error) {
	var p2 [2]int
	if err := syscall.Pipe2(p2[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, err
	}
	p := &poller{wakeR: p2[0], wakeW: p2[1]}
	n := min(max(runtime.GOMAXPROCS(0), 1), maxPollLoops)
	for range n {
		epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			p.closeFds()
			return nil, err
		}
		l := &pollLoop{p: p, epfd: epfd}
		p.loops = append(p.loops, l)
		l.readFn, l.writeFn, l.directFn = l.read, l.write, l.direct
		for i := 0; i < len(l.wbuf); i += 2 {
			l.wbuf[i] = packets.Pingresp << 4
		}
		// The pipe's id is 0, which no connection has.
		if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.wakeR, &syscall.EpollEvent{Events: syscall.EPOLLIN}); err != nil {
			p.closeFds()
			return nil, err
		}
	}
	p.running.Store(int32(n))
	for _, l := range p.loops {
		go l.run()
	}
	return p, nil
}

func (p *poller) closeFds() {
	for _, l := range p.loops {
		syscall.Close(l.epfd)
	}
	syscall.Close(p.wakeR)
	syscall.Close(p.wakeW)
}

// loopOf is the loop of the connection with id.
func (p *poller) loopOf(id uint64) *pollLoop {
	return p.loops[(uint32(id)-1)%uint32(len(p.loops))]
}

// run waits for events and wakes their connections (or answers them).
func (l *pollLoop) run() {
	p := l.p
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(l.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for i := range events[:n] {
			id := uint64(uint32(events[i].Fd)) | uint64(uint32(events[i].Pad))<<32
			if id == 0 {
				if p.running.Add(-1) == 0 {
					p.closeFds()
				}
				return
			}
			c := p.lookup(id)
			if c != nil {
				l.serve(c, events[i].Events)
			}
		}
	}
}

// add gives c an id for its events (never 0, the pipe's).
func (p *poller) add(c *conn) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var i uint32
	if n := len(p.free); n > 0 {
		i = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		p.slots = append(p.slots, pollSlot{})
		i = uint32(len(p.slots) - 1)
	}
	p.slots[i].c = c
	return uint64(i+1) | uint64(p.slots[i].gen)<<32
}

// lookup returns the connection of id, nil if it was forgotten.
func (p *poller) lookup(id uint64) *conn {
	i := int(uint32(id)) - 1
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || i >= len(p.slots) || p.slots[i].gen != uint32(id>>32) {
		return nil
	}
	return p.slots[i].c
}

// forget drops c's id (its connection has ended); the slot's next
// connection gets the next generation.
func (p *poller) forget(id uint64) {
	i := int(uint32(id)) - 1
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || i >= len(p.slots) || p.slots[i].gen != uint32(id>>32) || p.slots[i].c == nil {
		return
	}
	p.slots[i] = pollSlot{gen: p.slots[i].gen + 1}
	p.free = append(p.free, uint32(i))
}

// arm registers c's descriptor (rc's) for one event. It runs inside the
// descriptor's Control, so a connection closed meanwhile is an error
// rather than a descriptor number that another connection may reuse.
func (p *poller) arm(c *conn, rc syscall.RawConn) error {
	var err error
	id := c.pollID
	ev := syscall.EpollEvent{Events: pollEvents, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	epfd := p.loopOf(id).epfd
	cerr := rc.Control(func(fd uintptr) {
		err = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_MOD, int(fd), &ev)
		if err == syscall.ENOENT {
			err = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
		}
	})
	if cerr != nil {
		return cerr
	}
	return err
}

// close stops the loop.
func (p *poller) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	_, _ = syscall.Write(p.wakeW, []byte{0})
}
