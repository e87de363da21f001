package frontend

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

var errTestClosed = errors.New("test: server closed")

// echoConn serves by echoing until its transport closes; it records how
// it ended.
type echoConn struct {
	nc      net.Conn
	name    string
	open    bool // reports info (past its handshake)
	goodbye chan string
	aborted atomic.Bool
	stuck   bool // ignores goodbyes: only Abort ends it
}

func (c *echoConn) Serve() {
	buf := make([]byte, 64)
	for {
		n, err := c.nc.Read(buf)
		if err != nil {
			return
		}
		if _, err := c.nc.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (c *echoConn) Abort() { c.aborted.Store(true); c.nc.Close() }

func (c *echoConn) sayGoodbye(reason string) {
	c.goodbye <- reason
	if !c.stuck {
		c.nc.Close()
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serve starts s on a fresh listener; wrapped receives each Conn made.
func serve(t *testing.T, s *Set[*echoConn], stuck bool) (string, chan *echoConn, chan error) {
	ln := listen(t)
	made := make(chan *echoConn, 16)
	var n atomic.Int64
	errc := make(chan error, 1)
	go func() {
		errc <- s.Serve(ln, func(nc net.Conn) *echoConn {
			c := &echoConn{nc: nc, name: "c" + strconv.FormatInt(n.Add(1), 10), open: true, goodbye: make(chan string, 1), stuck: stuck}
			made <- c
			return c
		})
	}()
	return ln.Addr().String(), made, errc
}

func dialEcho(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := nc.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("echo %q %v", buf, err)
	}
	return nc
}

func info(c *echoConn) (string, bool) { return c.name, c.open }

func TestServeListFindShutdown(t *testing.T) {
	s := NewSet[*echoConn](errTestClosed)
	addr, made, errc := serve(t, s, false)
	a, b := dialEcho(t, addr), dialEcho(t, addr)
	defer a.Close()
	defer b.Close()
	ca, cb := <-made, <-made
	cb.open = false // still in its handshake: not listed
	if got := List(s, info, func(n string) string { return n }); len(got) != 1 || got[0] != ca.name {
		t.Fatalf("List = %v, want [%s]", got, ca.name)
	}
	if c, ok := s.Find(func(c *echoConn) string { return c.name }, cb.name); !ok || c != cb {
		t.Fatalf("Find(%s) = %v %v", cb.name, c, ok)
	}
	if _, ok := s.Find(func(c *echoConn) string { return c.name }, "nobody"); ok {
		t.Fatal("Find found a connection that is not there")
	}
	// A connection that ends leaves the set.
	a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Snapshot()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections after one closed", len(s.Snapshot()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Shutdown says goodbye to each, stops accepting, and Serve returns
	// the front end's error.
	if err := s.Shutdown(context.Background(), func(c *echoConn) { c.sayGoodbye("shutdown") }); err != nil {
		t.Fatal(err)
	}
	if r := <-cb.goodbye; r != "shutdown" {
		t.Fatalf("goodbye %q", r)
	}
	if cb.aborted.Load() {
		t.Fatal("a connection that ended on its goodbye was aborted")
	}
	if err := <-errc; !errors.Is(err, errTestClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	if !s.Closing() {
		t.Fatal("not closing after Shutdown")
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("the listener still accepts after Shutdown")
	}
}

func TestShutdownDeadlineAborts(t *testing.T) {
	s := NewSet[*echoConn](errTestClosed)
	addr, made, _ := serve(t, s, true)
	nc := dialEcho(t, addr)
	defer nc.Close()
	c := <-made
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx, func(c *echoConn) { c.sayGoodbye("shutdown") }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the deadline", err)
	}
	if !c.aborted.Load() {
		t.Fatal("a connection still open at the deadline was not aborted")
	}
}

func TestStartAfterShutdown(t *testing.T) {
	s := NewSet[*echoConn](errTestClosed)
	if err := s.Shutdown(context.Background(), func(*echoConn) {}); err != nil {
		t.Fatal(err)
	}
	client, server := net.Pipe()
	defer client.Close()
	c := &echoConn{nc: server}
	done := make(chan struct{})
	if s.Start(c, done) {
		t.Fatal("Start accepted a connection during shutdown")
	}
	<-done
	if !c.aborted.Load() {
		t.Fatal("a refused connection was not aborted")
	}
	if err := s.Serve(listen(t), func(net.Conn) *echoConn { return nil }); !errors.Is(err, errTestClosed) {
		t.Fatalf("Serve after Shutdown = %v", err)
	}
}

// flakyListener fails its first Accepts with a temporary (timeout) error,
// as a process out of file descriptors sees, then accepts.
type flakyListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "accept: too many open files" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, timeoutErr{}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func TestServeBacksOffTemporaryErrors(t *testing.T) {
	s := NewSet[*echoConn](errTestClosed)
	fl := &flakyListener{Listener: listen(t), fails: 3}
	errc := make(chan error, 1)
	go func() {
		errc <- s.Serve(fl, func(nc net.Conn) *echoConn { return &echoConn{nc: nc, goodbye: make(chan string, 1)} })
	}()
	nc := dialEcho(t, fl.Addr().String()) // served once the errors passed
	nc.Close()
	if err := s.Shutdown(context.Background(), func(c *echoConn) { c.sayGoodbye("") }); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, errTestClosed) {
		t.Fatalf("Serve = %v", err)
	}
}

// asyncConn returns from ServeAsync at once and ends when its transport
// closes, on another goroutine (as a connection waiting in an event loop).
type asyncConn struct{ nc net.Conn }

func (c *asyncConn) Serve() { panic("Start must use ServeAsync") }

func (c *asyncConn) Abort() { c.nc.Close() }

func (c *asyncConn) ServeAsync(ended func(any)) {
	go func() {
		_, _ = c.nc.Read(make([]byte, 1))
		ended(c)
	}()
}

// TestAsyncConnStaysUntilEnded: an AsyncConn is served by ServeAsync and
// is part of the set after ServeAsync returned, until it calls ended;
// Shutdown waits for that.
func TestAsyncConnStaysUntilEnded(t *testing.T) {
	s := NewSet[*asyncConn](errTestClosed)
	a, b := net.Pipe()
	defer b.Close()
	c := &asyncConn{nc: a}
	done := make(chan struct{})
	if !s.Start(c, done) {
		t.Fatal("Start refused")
	}
	time.Sleep(50 * time.Millisecond)
	if got := s.Snapshot(); len(got) != 1 || got[0] != c {
		t.Fatalf("Snapshot = %v, want the connection that is still open", got)
	}
	select {
	case <-done:
		t.Fatal("done before the connection ended")
	default:
	}
	if err := s.Shutdown(context.Background(), func(c *asyncConn) { c.nc.Close() }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	default:
		t.Fatal("Shutdown returned before the connection ended")
	}
	if got := s.Snapshot(); len(got) != 0 {
		t.Fatalf("Snapshot after the end = %v", got)
	}
}

// recordingConn is an asyncConn that records the ended function it was
// given.
type recordingConn struct {
	asyncConn
	got chan func(any)
}

func (c *recordingConn) ServeAsync(ended func(any)) {
	c.got <- ended
	go func() {
		_, _ = c.nc.Read(make([]byte, 1))
		ended(c)
	}()
}

// TestAsyncConnsShareEnded: connections started without a done channel
// are all given the set's one ended function (no closure a connection),
// which takes each out of the set when it ends.
func TestAsyncConnsShareEnded(t *testing.T) {
	s := NewSet[*recordingConn](errTestClosed)
	var ends []func(any)
	var peers []net.Conn
	for range 2 {
		a, b := net.Pipe()
		peers = append(peers, b)
		c := &recordingConn{asyncConn: asyncConn{nc: a}, got: make(chan func(any), 1)}
		if !s.Start(c, nil) {
			t.Fatal("Start refused")
		}
		ends = append(ends, <-c.got)
	}
	fv := func(f func(any)) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&f)) }
	if fv(ends[0]) != fv(ends[1]) {
		t.Error("each connection was given a function of its own")
	}
	for _, p := range peers {
		p.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Snapshot()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections left in the set after they ended", len(s.Snapshot()))
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Shutdown(context.Background(), func(*recordingConn) {}); err != nil {
		t.Fatal(err)
	}
}
