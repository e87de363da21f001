package mux

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func newMux(t *testing.T, cookie string) *Mux {
	t.Helper()
	m, err := Listen("127.0.0.1:0", "", cookie, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// echo accepts on l and echoes every connection until l closes.
func echo(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo %q, %v", buf, err)
	}
}

func TestStreams(t *testing.T) {
	a, b := newMux(t, "k"), newMux(t, "k")
	for _, s := range []string{"one", "two"} {
		l, err := b.Listener(s)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go echo(l)
	}
	for _, s := range []string{"one", "two"} {
		c, err := a.Dial(b.Addr(), s, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, c, "hello "+s)
		if PeerAddr(c) != b.Addr() {
			t.Fatalf("peer %q", PeerAddr(c))
		}
		c.Close()
	}
	if _, err := b.Listener("one"); !errors.Is(err, ErrStreamInUse) {
		t.Fatalf("second listener: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	a, b, other := newMux(t, "k"), newMux(t, "k"), newMux(t, "wrong")
	l, _ := b.Listener("s")
	go echo(l)
	var re *RefusedError
	if _, err := a.Dial(b.Addr(), "nope", time.Second); !errors.As(err, &re) || re.Status != StatusUnknownStream {
		t.Fatalf("unknown stream: %v", err)
	}
	// Another cookie: the dialer finds out first (the acceptor's proof
	// fails) and tells the acceptor with a proof that fails too.
	if _, err := other.Dial(b.Addr(), "s", time.Second); !errors.Is(err, ErrPeerNotAuthenticated) {
		t.Fatalf("bad cookie: %v", err)
	}
	l.Close() // unregisters
	if _, err := a.Dial(b.Addr(), "s", time.Second); !errors.As(err, &re) || re.Status != StatusUnknownStream {
		t.Fatalf("after close: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
}

// TestHostileHeaders: garbage gets StatusBadHeader, a silent peer is cut
// off after the handshake timeout.
func TestHostileHeaders(t *testing.T) {
	m := newMux(t, "k")
	m.handshake.Store(int64(200 * time.Millisecond))
	c, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	b, _ := io.ReadAll(c)
	if len(b) != 1 || Status(b[0]) != StatusBadHeader {
		t.Fatalf("garbage answered %q", b)
	}
	c.Close()

	c, err = net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("TRMX\x02\x05ab")) // then silence
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("silent peer: %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatal("silent peer not cut off")
	}
}

func TestSetBlocked(t *testing.T) {
	a, b := newMux(t, "k"), newMux(t, "k")
	la, _ := a.Listener("s")
	lb, _ := b.Listener("s")
	go echo(la)
	go echo(lb)
	ab, err := a.Dial(b.Addr(), "s", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ba, err := b.Dial(a.Addr(), "s", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, ab, "x")
	roundTrip(t, ba, "y")

	a.SetBlocked([]string{b.Addr()})
	// Both existing connections die (a closed its ends of both).
	for _, c := range []net.Conn{ab, ba} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("connection survived SetBlocked")
		}
	}
	if _, err := a.Dial(b.Addr(), "s", time.Second); !errors.Is(err, ErrBlocked) {
		t.Fatalf("dial blocked: %v", err)
	}
	var re *RefusedError
	if _, err := b.Dial(a.Addr(), "s", time.Second); !errors.As(err, &re) || re.Status != StatusBlocked {
		t.Fatalf("dial from blocked: %v", err)
	}
	if got := a.Blocked(); len(got) != 1 || got[0] != b.Addr() {
		t.Fatalf("Blocked = %v", got)
	}
	a.SetBlocked(nil)
	for _, d := range [][2]*Mux{{a, b}, {b, a}} {
		c, err := d[0].Dial(d[1].Addr(), "s", time.Second)
		if err != nil {
			t.Fatalf("after heal: %v", err)
		}
		roundTrip(t, c, "z")
		c.Close()
	}
}

func TestClose(t *testing.T) {
	a, b := newMux(t, "k"), newMux(t, "k")
	l, _ := b.Listener("s")
	go echo(l)
	c, err := a.Dial(b.Addr(), "s", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection survived Close")
	}
	if _, err := l.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("accept: %v", err)
	}
	if _, err := b.Listener("t"); !errors.Is(err, ErrClosed) {
		t.Fatalf("listener after close: %v", err)
	}
	if _, err := a.Dial(b.Addr(), "s", time.Second); err == nil {
		t.Fatal("dial to closed mux")
	}
}

func TestAdvertise(t *testing.T) {
	for _, tc := range []struct {
		adv  string
		ip   string
		want string
		bad  bool
	}{
		{"", "127.0.0.1", "127.0.0.1:7", false},
		{"", "0.0.0.0", "", true},
		{"10.1.2.3", "0.0.0.0", "10.1.2.3:7", false},
		{"node1:9000", "0.0.0.0", "node1:9000", false},
		{"node1:0", "0.0.0.0", "", true},
		{":9000", "0.0.0.0", "", true},
	} {
		got, err := advertiseAddr(tc.adv, &net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 7})
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("advertiseAddr(%q, %s) = %q, %v", tc.adv, tc.ip, got, err)
		}
	}
}

// TestReadAfterLocalCloseIsEOF: a read waiting on a stream connection
// when this side closes it (the mux closes, or SetBlocked cuts the peer)
// ends with io.EOF, as when the peer closes, not with a "use of closed
// network connection" that Raft's transport would log as a failed decode.
func TestReadAfterLocalCloseIsEOF(t *testing.T) {
	a, b := newMux(t, "k"), newMux(t, "k")
	l, err := b.Listener("s")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := a.Dial(b.Addr(), "s", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := <-accepted
	read := make(chan error, 1)
	go func() {
		var buf [1]byte
		_, err := in.Read(buf[:])
		read <- err
	}()
	time.Sleep(50 * time.Millisecond)
	b.Close()
	select {
	case err := <-read:
		if err != io.EOF {
			t.Fatalf("read after the mux closed: %v, want io.EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read still waiting after the mux closed")
	}
}
