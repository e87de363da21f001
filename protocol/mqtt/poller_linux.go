package mqtt

import (
	"sync"
	"syscall"
)

// poller is the event loop that idle connections wait in: a connection
// whose socket is empty registers its descriptor here (one-shot) and its
// reader goroutine returns, so an idle connection holds no goroutine and
// no stack. When input arrives (or the peer hangs up) the loop starts a
// goroutine that reads on (conn.resume). One loop goroutine per server;
// the descriptor stays registered with the runtime's own poller too, which
// the connection's writes and its reads in the middle of a packet use.
type poller struct {
	epfd  int
	wakeR int // the read end of a pipe, to stop the loop
	wakeW int

	mu     sync.Mutex
	conns  map[uint64]*conn
	next   uint64
	closed bool
}

const pollEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	var p2 [2]int
	if err := syscall.Pipe2(p2[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	p := &poller{epfd: epfd, wakeR: p2[0], wakeW: p2[1], conns: map[uint64]*conn{}}
	// The pipe's id is 0, which no connection has.
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.wakeR, &syscall.EpollEvent{Events: syscall.EPOLLIN}); err != nil {
		p.closeFds()
		return nil, err
	}
	go p.run()
	return p, nil
}

func (p *poller) closeFds() {
	syscall.Close(p.epfd)
	syscall.Close(p.wakeR)
	syscall.Close(p.wakeW)
}

// run waits for events and wakes their connections.
func (p *poller) run() {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for i := range events[:n] {
			id := uint64(uint32(events[i].Fd)) | uint64(uint32(events[i].Pad))<<32
			if id == 0 {
				p.closeFds()
				return
			}
			p.mu.Lock()
			c := p.conns[id]
			p.mu.Unlock()
			if c != nil {
				c.wake()
			}
		}
	}
}

// add gives c an id for its events.
func (p *poller) add(c *conn) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	p.conns[p.next] = c
	return p.next
}

// forget drops c's id (its connection has ended).
func (p *poller) forget(id uint64) {
	p.mu.Lock()
	delete(p.conns, id)
	p.mu.Unlock()
}

// arm registers c's descriptor (rc's) for one event. It runs inside the
// descriptor's Control, so a connection closed meanwhile is an error
// rather than a descriptor number that another connection may reuse.
func (p *poller) arm(c *conn, rc syscall.RawConn) error {
	var err error
	id := c.pollID
	ev := syscall.EpollEvent{Events: pollEvents, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	cerr := rc.Control(func(fd uintptr) {
		err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_MOD, int(fd), &ev)
		if err == syscall.ENOENT {
			err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
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
