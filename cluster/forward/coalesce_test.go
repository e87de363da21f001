package forward

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func TestCoalescingConnKeepsOrderAndFlushesOnClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		got <- b
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := newCoalescingConn(raw)
	var want bytes.Buffer
	for i := 0; i < 20000; i++ {
		p := []byte{byte(i), byte(i >> 8), byte(i >> 16), 0xAB}
		want.Write(p)
		if n, err := c.Write(p); n != len(p) || err != nil {
			t.Fatalf("write %d: %d %v", i, n, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("received %d bytes, want %d (or different content)", len(b), want.Len())
	}
	if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

func TestCoalescingConnReportsWriteErrors(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	c := newCoalescingConn(a)
	defer c.Close()
	var err error
	for deadline := time.Now().Add(5 * time.Second); err == nil && time.Now().Before(deadline); {
		_, err = c.Write([]byte("x"))
		time.Sleep(time.Millisecond)
	}
	if err == nil {
		t.Fatal("writes to a closed peer kept succeeding")
	}
}
