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
