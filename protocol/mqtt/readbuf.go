package mqtt

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/trident-broker/trident/exchange"
)

// readBufSize is the size of a connection's read buffer.
const readBufSize = 2048

// readBufPool holds the read buffers of connections that are not reading.
var readBufPool = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// connReader is the reader goroutine's buffered reader (io.Reader and
// io.ByteReader, as wire.ReadRaw wants). On a plain TCP connection it holds
// a buffer only while there is input: when a read finds the socket empty
// it gives the buffer back to readBufPool before it waits, and takes one
// again when input comes (see rawRead), so an idle connection keeps no read
// buffer. That costs no system call more than a bufio.Reader makes: the
// read that finds the socket empty is the one it makes anyway before it
// waits. On any other connection (TLS, WebSocket) the buffer stays.
type connReader struct {
	nc   net.Conn
	rc   syscall.RawConn // nc's, for a *net.TCPConn; nil otherwise
	bufp *[]byte         // from readBufPool; nil while none is held
	buf  []byte          // *bufp
	r, w int             // buf[r:w] is buffered
	err  error           // a read error to return once buf[r:w] is read

	// batch is the publisher's run (exchange.Batch): what the packets
	// read so far published shares one clock reading, and the consumers'
	// writers they deferred are woken before the reader next waits
	// (flushBatch, at every read that may wait or finds nothing).
	batch exchange.Batch

	rawFn func(fd uintptr) bool // rawRead, made once
	tryFn func(fd uintptr) bool // tryRead, made once
	n     int                   // rawRead's result
	rerr  error
	empty bool // tryRead found the socket empty
	// drained: what is buffered is all the socket had when it was read
	// (the event loop's short read, handOver): the first tryFill after it
	// is consumed reports the socket empty without a read. Data that came
	// meanwhile is not lost: park's arming of the descriptor (epoll_ctl)
	// reports what is already there, so it wakes the connection at once.
	drained bool
}

func newConnReader(nc net.Conn) *connReader {
	if tc, ok := nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			r := tcpReaders.Get().(*connReader)
			r.nc, r.rc = nc, rc
			return r
		}
	}
	return &connReader{nc: nc}
}

// tcpReaders holds the readers of parked plain TCP connections: a parked
// connection has none (park gives its reader back, readOn takes one), so
// an idle device keeps neither the reader (144 bytes) nor its two read
// callbacks (rawFn, tryFn: 16 bytes each, bound to the reader, which is
// why they go with it).
var tcpReaders = sync.Pool{New: func() any {
	r := &connReader{}
	r.rawFn, r.tryFn = r.rawRead, r.tryRead
	return r
}}

// putBack gives a plain TCP connection's reader back to tcpReaders; it
// holds no buffer and nothing is buffered (tryFill found the socket
// empty). The reader must not be used afterwards.
func (r *connReader) putBack() {
	*r = connReader{rawFn: r.rawFn, tryFn: r.tryFn}
	tcpReaders.Put(r)
}

// handOver makes r start with what the event loop already read from the
// socket (pingfast.go): b is buffered as if r had read it, and rerr (the
// read's error number) or eof is what its next read then returns. b is
// copied; it is at most readBufSize long.
func (r *connReader) handOver(b []byte, rerr error, eof bool) {
	if len(b) > 0 {
		r.take()
		r.r, r.w = 0, copy(r.buf, b)
	}
	switch {
	case rerr != nil:
		r.rerr = rerr
		r.err = r.readError()
	case eof:
		r.err = io.EOF
	}
}

// Buffered is the number of bytes that can be read without waiting.
func (r *connReader) Buffered() int { return r.w - r.r }

// Wait waits until a byte can be read, or returns the read error.
func (r *connReader) Wait() error {
	if r.r < r.w {
		return nil
	}
	return r.fill()
}

// Peek returns the buffered bytes, without consuming them; valid until
// the next read.
func (r *connReader) Peek() []byte { return r.buf[r.r:r.w] }

// Next is the next byte, which must be buffered (Wait).
func (r *connReader) Next() byte { return r.buf[r.r] }

// ReadByte implements io.ByteReader.
func (r *connReader) ReadByte() (byte, error) {
	if r.r == r.w {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	b := r.buf[r.r]
	r.r++
	return b, nil
}

// Read implements io.Reader. A read as large as the buffer, with nothing
// buffered, goes straight into p.
func (r *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.r == r.w {
		if len(p) >= readBufSize && r.err == nil {
			r.drained = false
			r.flushBatch()
			return r.nc.Read(p)
		}
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.r:r.w])
	r.r += n
	return n, nil
}

// flushBatch ends the publisher's run before a read that may wait: the
// writers its deliveries deferred are woken and the next publish reads
// the clock again.
func (r *connReader) flushBatch() {
	if r.batch.Active() {
		r.batch.Flush()
		r.batch.Tick()
	}
}

// fill reads into the empty buffer, at least one byte or an error.
func (r *connReader) fill() error {
	r.drained = false
	r.flushBatch()
	r.r, r.w = 0, 0
	if err := r.err; err != nil {
		r.err = nil
		return err
	}
	if r.rc == nil {
		r.take()
		for range 100 { // as bufio.Reader, a reader that returns nothing for ever is broken
			n, err := r.nc.Read(r.buf)
			if n > 0 {
				r.w, r.err = n, err
				return nil
			}
			if err != nil {
				return err
			}
		}
		return io.ErrNoProgress
	}
	if err := r.rc.Read(r.rawFn); err != nil {
		return err // a deadline, or the connection closed
	}
	switch {
	case r.rerr != nil:
		return r.readError()
	case r.n == 0:
		return io.EOF
	}
	r.w = r.n
	return nil
}

// tryFill is fill without the wait, for a plain TCP connection (rc not
// nil): wouldBlock when the socket is empty (no buffer is then held).
func (r *connReader) tryFill() (wouldBlock bool, err error) {
	r.flushBatch()
	r.r, r.w = 0, 0
	if err := r.err; err != nil {
		r.err = nil
		return false, err
	}
	if r.drained {
		r.drained = false
		r.release()
		return true, nil
	}
	r.empty = false
	if err := r.rc.Read(r.tryFn); err != nil {
		return false, err
	}
	switch {
	case r.empty:
		return true, nil
	case r.rerr != nil:
		return false, r.readError()
	case r.n == 0:
		return false, io.EOF
	}
	r.w = r.n
	return false, nil
}

// tryRead is rawRead that never has the runtime wait.
func (r *connReader) tryRead(fd uintptr) bool {
	if !r.rawRead(fd) {
		r.empty = true
	}
	return true
}

// readError is rawRead's error as net.Conn's Read would return it. It is
// kept out of fill, whose frame is on the stack of an idle connection.
//
//go:noinline
func (r *connReader) readError() error {
	return &net.OpError{Op: "read", Net: "tcp", Source: r.nc.LocalAddr(), Addr: r.nc.RemoteAddr(),
		Err: os.NewSyscallError("read", r.rerr)}
}

// rawRead is the syscall.RawConn read callback: it reads what the socket
// has into a buffer it takes from the pool, or, when the socket is empty,
// gives the buffer back and returns false to have the runtime wait for
// input and call it again.
func (r *connReader) rawRead(fd uintptr) bool {
	r.take()
	for {
		n, err := syscall.Read(int(fd), r.buf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			r.release()
			return false
		}
		if n <= 0 || err != nil { // the end, or an error: nothing to buffer
			n = 0
			r.release()
		}
		r.n, r.rerr = n, err
		return true
	}
}

// take makes sure a buffer is held.
func (r *connReader) take() {
	if r.bufp == nil {
		r.bufp = readBufPool.Get().(*[]byte)
		r.buf = *r.bufp
	}
}

// release gives the buffer back; nothing may be buffered.
func (r *connReader) release() {
	if r.bufp != nil {
		readBufPool.Put(r.bufp)
		r.bufp, r.buf = nil, nil
	}
}
