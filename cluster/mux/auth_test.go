package mux

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawHandshake plays a dialer by hand against m: header with nonce, the
// challenge read, then the proof given (nil: the right one under cookie);
// it returns the final status.
func rawHandshake(t *testing.T, m *Mux, cookie, stream, self string, nonce, give []byte) (Status, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	hdr, err := AppendHeader(nil, Header{Stream: stream, Nonce: string(nonce), Addr: self})
	if err != nil {
		t.Fatal(err)
	}
	ch := make([]byte, challengeLen)
	if _, err := c.Write(hdr); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, ch); err != nil {
		t.Fatal(err)
	}
	if Status(ch[0]) != StatusChallenge {
		t.Fatalf("status %v, want challenge", Status(ch[0]))
	}
	ns := ch[1 : 1+NonceLen]
	if !bytes.Equal(ch[1+NonceLen:], proof([]byte(cookie), roleAcceptor, stream, m.Addr(), self, nonce, ns)) {
		t.Fatal("acceptor's proof does not verify")
	}
	if give == nil {
		give = proof([]byte(cookie), roleDialer, stream, m.Addr(), self, nonce, ns)
	}
	if _, err := c.Write(give); err != nil {
		t.Fatal(err)
	}
	var st [1]byte
	if _, err := io.ReadFull(c, st[:]); err != nil {
		t.Fatal(err)
	}
	return Status(st[0]), give
}

// TestHandshakeReplay: a dialer's proof is good for one handshake only
// (the acceptor's nonce is fresh each time), and an acceptor's proof
// cannot pass for a dialer's.
func TestHandshakeReplay(t *testing.T) {
	m := newMux(t, "k")
	l, _ := m.Listener("s")
	go echo(l)
	nonce := bytes.Repeat([]byte{7}, NonceLen)
	st, used := rawHandshake(t, m, "k", "s", "10.0.0.9:1", nonce, nil)
	if st != StatusOK {
		t.Fatalf("right proof: %v", st)
	}
	if st, _ := rawHandshake(t, m, "k", "s", "10.0.0.9:1", nonce, used); st != StatusBadCookie {
		t.Fatalf("replayed proof: %v, want bad cookie", st)
	}
	if st, _ := rawHandshake(t, m, "k", "s", "10.0.0.9:1", nonce, make([]byte, ProofLen)); st != StatusBadCookie {
		t.Fatalf("zero proof: %v", st)
	}
}

// TestHandshakeBadNonce: a header whose nonce is not NonceLen bytes is a
// bad header.
func TestHandshakeBadNonce(t *testing.T) {
	m := newMux(t, "k")
	c, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hdr, _ := AppendHeader(nil, Header{Stream: "s", Nonce: "k", Addr: "x:1"})
	c.Write(hdr)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	if len(b) != 1 || Status(b[0]) != StatusBadHeader {
		t.Fatalf("answer %q", b)
	}
}

// TestCookieNeverSent: what a dialer sends to a node outside the cluster
// (a plain listener recording every byte, answering a made-up challenge)
// does not contain the cookie, and the dial fails as not authenticated.
func TestCookieNeverSent(t *testing.T) {
	const secret = "the-cluster-cookie-0123456789"
	a := newMux(t, secret)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var seen []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, MaxHeaderLen)
		n, _ := c.Read(buf)
		mu.Lock()
		seen = append(seen, buf[:n]...)
		mu.Unlock()
		c.Write(append([]byte{byte(StatusChallenge)}, make([]byte, NonceLen+ProofLen)...))
		rest, _ := io.ReadAll(c)
		mu.Lock()
		seen = append(seen, rest...)
		mu.Unlock()
	}()
	_, err = a.Dial(ln.Addr().String(), "meta-rpc", 2*time.Second)
	if !errors.Is(err, ErrPeerNotAuthenticated) {
		t.Fatalf("dial to an outsider: %v", err)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the outsider saw nothing: test broken")
	}
	if strings.Contains(string(seen), secret) {
		t.Fatalf("the cookie went to a node outside the cluster: %q", seen)
	}
}

// TestHandshakeBoundToAddress: a proof is made for the address dialled;
// a node reached under an address it does not advertise does not pass
// (a member's handshake cannot be relayed to another node).
func TestHandshakeBoundToAddress(t *testing.T) {
	a := newMux(t, "k")
	b, err := Listen("127.0.0.1:0", "localhost", "k", nil) // advertises localhost:port
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, _ := b.Listener("s")
	go echo(l)
	if _, err := a.Dial(b.BoundAddr().String(), "s", time.Second); !errors.Is(err, ErrPeerNotAuthenticated) {
		t.Fatalf("dial under another address: %v", err)
	}
	c, err := a.Dial(b.Addr(), "s", time.Second)
	if err != nil {
		t.Fatalf("dial under the advertised address: %v", err)
	}
	roundTrip(t, c, "ok")
	c.Close()
}

// TestListenNeedsCookie: there is no mux without a cookie.
func TestListenNeedsCookie(t *testing.T) {
	if _, err := Listen("127.0.0.1:0", "", "", nil); !errors.Is(err, ErrNoCookie) {
		t.Fatalf("empty cookie: %v", err)
	}
}

// TestProofDistinct: the proof depends on every field and on the role.
func TestProofDistinct(t *testing.T) {
	n1, n2 := bytes.Repeat([]byte{1}, NonceLen), bytes.Repeat([]byte{2}, NonceLen)
	base := proof([]byte("k"), roleDialer, "s", "t:1", "d:1", n1, n2)
	for name, p := range map[string][]byte{
		"cookie": proof([]byte("K"), roleDialer, "s", "t:1", "d:1", n1, n2),
		"role":   proof([]byte("k"), roleAcceptor, "s", "t:1", "d:1", n1, n2),
		"stream": proof([]byte("k"), roleDialer, "S", "t:1", "d:1", n1, n2),
		"target": proof([]byte("k"), roleDialer, "s", "t:2", "d:1", n1, n2),
		"dialer": proof([]byte("k"), roleDialer, "s", "t:1", "d:2", n1, n2),
		"nonces": proof([]byte("k"), roleDialer, "s", "t:1", "d:1", n2, n1),
		"split":  proof([]byte("k"), roleDialer, "s", "t:1d", ":1", n1, n2),
	} {
		if bytes.Equal(p, base) {
			t.Errorf("%s does not change the proof", name)
		}
	}
}
