package mqtt

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// connReader returns what was sent, through small and large reads, when
// more arrives at once than its buffer holds; it holds no buffer while it
// waits; and it ends with io.EOF.
func TestConnReaderStream(t *testing.T) {
	for _, tcp := range []bool{true, false} {
		client, server := tcpPair(t)
		var r *connReader
		if tcp {
			r = newConnReader(server)
			if r.rc == nil {
				t.Fatal("no raw connection on a TCP connection")
			}
		} else {
			r = newConnReader(struct{ net.Conn }{server}) // not a *net.TCPConn
		}
		want := make([]byte, 200<<10)
		for i := range want {
			want[i] = byte(i * 7)
		}
		go func() {
			_, _ = client.Write(want[:100<<10])
			time.Sleep(20 * time.Millisecond)
			_, _ = client.Write(want[100<<10:])
			client.Close()
		}()
		var got []byte
		for step := 0; len(got) < len(want); step++ {
			if err := r.Wait(); err != nil {
				t.Fatalf("tcp %v: Wait after %d bytes: %v", tcp, len(got), err)
			}
			if r.Buffered() == 0 {
				t.Fatal("Wait returned with nothing buffered")
			}
			if r.Next() != want[len(got)] {
				t.Fatalf("Next at %d", len(got))
			}
			switch step % 3 {
			case 0:
				b, err := r.ReadByte()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, b)
			case 1:
				p := make([]byte, 100)
				n, err := r.Read(p)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, p[:n]...)
			case 2:
				p := make([]byte, min(5000, len(want)-len(got)))
				if _, err := io.ReadFull(r, p); err != nil {
					t.Fatal(err)
				}
				got = append(got, p...)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("tcp %v: the bytes read differ from those sent", tcp)
		}
		if err := r.Wait(); !errors.Is(err, io.EOF) {
			t.Fatalf("tcp %v: at the end: %v, want EOF", tcp, err)
		}
		if tcp && r.bufp != nil {
			t.Fatal("a buffer is held after the socket was found empty")
		}
		r.release()
	}
}

// A read deadline and a close end a wait with the errors net.Conn gives.
func TestConnReaderDeadlineAndClose(t *testing.T) {
	_, server := tcpPair(t)
	r := newConnReader(server)
	_ = server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	err := r.Wait()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("after the deadline: %v, want a timeout", err)
	}
	if r.bufp != nil {
		t.Fatal("a buffer is held while waiting")
	}
	_ = server.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		server.Close()
	}()
	if err := r.Wait(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after close: %v, want net.ErrClosed", err)
	}
}

// A reader handed the event loop's short read (drained) reports the
// socket empty once what it was handed is consumed, without reading the
// socket (what came meanwhile stays there for the level-triggered wake
// that parking arms), holding no buffer; its next tryFill reads. A
// blocking read in between forgets drained.
func TestConnReaderDrainedSkipsOneRead(t *testing.T) {
	client, server := tcpPair(t)
	for _, blockingRead := range []bool{false, true} {
		r := newConnReader(server)
		r.handOver([]byte("ab"), nil, false)
		r.drained = true
		if _, err := client.Write([]byte("cd")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // "cd" is in the socket
		for _, want := range []byte("ab") {
			if b, err := r.ReadByte(); err != nil || b != want {
				t.Fatalf("ReadByte: %q %v", b, err)
			}
		}
		if blockingRead {
			// A reader that waits (a stream's) reads the socket: drained
			// no longer holds.
			if err := r.Wait(); err != nil {
				t.Fatal(err)
			}
			if got := string(r.Peek()); got != "cd" {
				t.Fatalf("after Wait: %q", got)
			}
			r.r = r.w
			if _, err := client.Write([]byte("ef")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			if wb, err := r.tryFill(); err != nil || wb || string(r.Peek()) != "ef" {
				t.Fatalf("tryFill after a Wait: wouldBlock %v, %v, %q", wb, err, r.Peek())
			}
			r.r = r.w
			continue
		}
		wb, err := r.tryFill()
		if err != nil || !wb || r.bufp != nil {
			t.Fatalf("first tryFill after a drained hand-over: wouldBlock %v, %v, buffer held %v", wb, err, r.bufp != nil)
		}
		wb, err = r.tryFill()
		if err != nil || wb || string(r.Peek()) != "cd" {
			t.Fatalf("second tryFill: wouldBlock %v, %v, %q", wb, err, r.Peek())
		}
		r.r = r.w
	}
}
