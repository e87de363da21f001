package frontend

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// outSink appends each delivery's body to an Output, as the front ends'
// sinks do, and reports back-pressure.
type outSink struct{ o *Output }

func (s outSink) Deliver(d exchange.Delivery) bool {
	s.o.Mu.Lock()
	defer s.o.Mu.Unlock()
	s.o.Buf = append(s.o.Buf, d.Msg.Body...)
	s.o.Signal()
	return !s.o.PauseLocked(d.Consumer)
}

func (outSink) Cancelled(*exchange.Consumer) {}

// TestOutputBackPressure runs the core over the in-memory store: a
// consumer whose connection's writer is stuck is paused once High bytes
// are queued (the rest stays in the queue), and resumes when the writer
// has drained the buffer under Low; every byte arrives, in order.
func TestOutputBackPressure(t *testing.T) {
	b, err := exchange.New(store.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureVHost("/"); err != nil {
		t.Fatal(err)
	}
	v, _ := b.VHost("/")
	if _, err := v.DeclareQueue("q", exchange.QueueOpts{}); err != nil {
		t.Fatal(err)
	}
	var o Output
	o.Init()
	if _, err := v.Consume("q", exchange.ConsumeOpts{Tag: "c", NoAck: true, Sink: outSink{&o}}); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var mu sync.Mutex
	var got bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- o.Run(func(buf []byte, _ []int) error {
			<-gate // stuck until the test opens it
			mu.Lock()
			got.Write(buf)
			mu.Unlock()
			return nil
		})
	}()
	const n, size = 3000, 4 << 10 // 12 MiB: three times High
	var want bytes.Buffer
	for i := range n {
		body := bytes.Repeat([]byte{byte(i)}, size)
		want.Write(body)
		if _, err := v.Publish(&exchange.Message{RoutingKey: "q", Body: body}, exchange.PublishOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	// The writer holds its first take; at most High more bytes were
	// queued behind it before the consumer was paused.
	q, _ := v.Queue("q", nil)
	ready, _, _ := q.Stats()
	o.Mu.Lock()
	queued, paused := len(o.Buf), len(o.Paused)
	o.Mu.Unlock()
	if paused != 1 || queued > High+size || ready < n-2*(High/size)-2 {
		t.Fatalf("stuck writer: %d bytes queued, %d paused, %d left in the queue", queued, paused, ready)
	}
	close(gate)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		l := got.Len()
		mu.Unlock()
		if l == want.Len() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("written %d of %d bytes", l, want.Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("bytes out of order")
	}
	o.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOutputPendingAndFailure: Pending wakes the writer for output that
// Prepare appends; a failed write closes the output, and WaitBelowHigh
// does not hang on a closed one.
func TestOutputPendingAndFailure(t *testing.T) {
	var o Output
	o.Init()
	var pending bool
	o.Pending = func() bool { return pending }
	o.Prepare = func() {
		if pending {
			o.Buf = append(o.Buf, "confirm"...)
			pending = false
		}
	}
	boom := errors.New("broken pipe")
	writes := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		done <- o.Run(func(buf []byte, _ []int) error {
			writes <- string(buf)
			return boom
		})
	}()
	o.Mu.Lock()
	pending = true
	o.Signal()
	o.Mu.Unlock()
	if w := <-writes; w != "confirm" {
		t.Fatalf("wrote %q", w)
	}
	if err := <-done; !errors.Is(err, boom) {
		t.Fatalf("Run = %v", err)
	}
	o.Mu.Lock()
	closed := o.Closed
	o.Buf = make([]byte, High) // a reader's view after the failure
	o.Mu.Unlock()
	if !closed {
		t.Fatal("not closed after a failed write")
	}
	o.WaitBelowHigh() // returns: the output is closed
}

// TestOutputWriteNow: records appended by several goroutines, each ending
// its run with WriteNow (as a publisher's batch does) or Signal, reach a
// TCP peer complete and in the order they were appended, while the peer
// reads slowly at first (so direct writes are short and the writer takes
// the rest) and then at full speed; after Stop everything has arrived.
func TestOutputWriteNow(t *testing.T) {
	server, client := tcpPair(t)
	_ = server.(*net.TCPConn).SetWriteBuffer(16 << 10) // fill it quickly

	var o Output
	o.Init()
	direct := NonBlockingWrite(server)
	if direct == nil {
		t.Fatal("no direct write on a TCP socket")
	}
	var directN, short atomic.Int64
	o.Direct = func(p []byte) (int, error) {
		n, err := direct(p)
		directN.Add(int64(n))
		if n < len(p) {
			short.Add(1)
		}
		return n, err
	}
	wdone := startWriter(&o, server)

	const first = 1 << 14 // records before the peer reads: 1 MiB
	const appenders, runs, perRun = 4, 300, 50
	const total = first + appenders*runs*perRun
	recs := records{o: &o}
	// The writer is idle: WriteNow writes what the socket takes of 1 MiB
	// (more than its buffers) and leaves the rest to the writer.
	o.Mu.Lock()
	recs.add(first)
	o.WriteNow()
	o.Mu.Unlock()
	if short.Load() != 1 {
		t.Fatalf("%d short direct writes of 1 MiB to a peer that does not read, want 1", short.Load())
	}
	var wg sync.WaitGroup
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range runs {
				for range perRun {
					o.Mu.Lock()
					recs.add(1)
					o.Mu.Unlock()
				}
				o.Mu.Lock()
				if (a+r)%3 == 0 {
					o.Signal()
				} else {
					o.WriteNow()
				}
				o.Mu.Unlock()
			}
		}()
	}
	readErr := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // the writer meets a full socket first
		readErr <- readRecords(client, total)
	}()
	wg.Wait()
	o.Stop()
	if err := <-wdone; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the peer did not receive every record")
	}
	t.Logf("%d of %d bytes written directly, %d short direct writes", directN.Load(), total*64, short.Load())
}

// TestOutputWriteNowInterleaved makes every direct write short and has
// another goroutine append records and wake the writer while it is under
// way: the writer must wait for the direct write, and the part it left
// must go out before what was appended meanwhile.
func TestOutputWriteNowInterleaved(t *testing.T) {
	server, client := tcpPair(t)
	var o Output
	o.Init()
	direct := NonBlockingWrite(server)
	recs := records{o: &o}
	o.Direct = func(p []byte) (int, error) {
		n, err := direct(p[:len(p)/2+1]) // short, and not at a record's end
		done := make(chan struct{})
		go func() {
			o.Mu.Lock()
			recs.add(10)
			o.Signal()
			o.Mu.Unlock()
			close(done)
		}()
		<-done
		time.Sleep(time.Millisecond) // the writer, if it did not wait, writes now
		return n, err
	}
	wdone := startWriter(&o, server)
	const rounds = 50
	const total = rounds * (100 + 10)
	readErr := make(chan error, 1)
	go func() { readErr <- readRecords(client, total) }()
	for range rounds {
		o.Mu.Lock()
		recs.add(100)
		o.WriteNow()
		o.Mu.Unlock()
		// Let the writer finish so that the next WriteNow finds it idle.
		o.Mu.Lock()
		for o.writing || len(o.Buf) > 0 {
			o.Mu.Unlock()
			time.Sleep(100 * time.Microsecond)
			o.Mu.Lock()
		}
		o.Mu.Unlock()
	}
	o.Stop()
	if err := <-wdone; err != nil {
		t.Fatal(err)
	}
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}
}

// records appends numbered 64-byte records (a small delivery's size) to
// an Output, Mu held, in the order readRecords expects them.
type records struct {
	o   *Output
	seq uint32
}

func (r *records) add(k int) {
	for range k {
		r.o.Buf = binary.BigEndian.AppendUint32(r.o.Buf, r.seq)
		r.o.Buf = append(r.o.Buf, make([]byte, 60)...)
		r.seq++
	}
}

// startWriter runs o's writer onto c; Run's result comes on the channel.
func startWriter(o *Output, c net.Conn) chan error {
	done := make(chan error, 1)
	go func() {
		done <- o.Run(func(buf []byte, _ []int) error {
			_, err := c.Write(buf)
			return err
		})
	}()
	return done
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// readRecords reads n 64-byte records numbered 0, 1, ... in order.
func readRecords(c net.Conn, n int) error { return newRecordReader(c).read(n) }

// recordReader reads the numbered records of records.add from a peer.
type recordReader struct {
	c    net.Conn
	r    *bufio.Reader
	next uint32 // the number expected next
}

func newRecordReader(c net.Conn) *recordReader { return &recordReader{c: c, r: bufio.NewReader(c)} }

// read reads the next n records, each within 10 s.
func (rr *recordReader) read(n int) error {
	rec := make([]byte, 64)
	for range n {
		_ = rr.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(rr.r, rec); err != nil {
			return fmt.Errorf("record %d: %w", rr.next, err)
		}
		if got := binary.BigEndian.Uint32(rec); got != rr.next {
			return fmt.Errorf("record %d arrived as number %d", rr.next, got)
		}
		rr.next++
	}
	return nil
}

// TestOutputWriteNowPending: output that the protocol keeps outside Buf
// until the writer's take (Pending, Prepare: AMQP's confirm runs) and
// that arrives while a direct write is under way is written without any
// further wake-up.
func TestOutputWriteNowPending(t *testing.T) {
	server, client := tcpPair(t)
	var o Output
	o.Init()
	pending := 0 // records kept outside Buf, under Mu
	recs := records{o: &o}
	o.Pending = func() bool { return pending > 0 }
	o.Prepare = func() { recs.add(pending); pending = 0 }
	direct := NonBlockingWrite(server)
	o.Direct = func(p []byte) (int, error) {
		n, err := direct(p)
		o.Mu.Lock()
		pending = 3 // as a confirm run recorded during the write
		o.Signal()  // the writer wakes, finds the write under way, waits
		o.Mu.Unlock()
		time.Sleep(time.Millisecond)
		return n, err
	}
	startWriter(&o, server)
	defer o.Stop()
	o.Mu.Lock()
	recs.add(5)
	o.WriteNow()
	o.Mu.Unlock()
	if err := readRecords(client, 8); err != nil {
		t.Fatal(err)
	}
}

// TestOutputBatch: deliveries made within a publisher's batch (SignalIn)
// wake no writer until the batch's Flush, which writes them itself up to
// DirectMax and leaves more to the writer; past DeferMax the writer is
// woken without waiting for the batch.
func TestOutputBatch(t *testing.T) {
	server, client := tcpPair(t)
	var o Output
	o.Init()
	direct := NonBlockingWrite(server)
	var directs atomic.Int64
	o.Direct = func(p []byte) (int, error) {
		directs.Add(1)
		return direct(p)
	}
	startWriter(&o, server)
	defer o.Stop()
	recs := records{o: &o}
	rr := newRecordReader(client)
	expect := func(n int) { // the next n records arrive
		t.Helper()
		if err := rr.read(n); err != nil {
			t.Fatal(err)
		}
	}
	deliver := func(b *exchange.Batch, n int) {
		for range n {
			o.Mu.Lock()
			recs.add(1)
			o.SignalIn(b)
			o.Mu.Unlock()
		}
	}
	var b exchange.Batch

	// One record through the writer, then wait until it is back in
	// Wait: it clears writing under Mu and keeps Mu until it waits, so
	// it sees no later append unless it is woken.
	idle := func() {
		o.Mu.Lock()
		for o.writing {
			o.Mu.Unlock()
			time.Sleep(time.Millisecond)
			o.Mu.Lock()
		}
		o.Mu.Unlock()
	}
	deliver(nil, 1)
	expect(1)
	idle()

	deliver(&b, 3)
	_ = client.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := rr.r.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a batch's delivery was written before its Flush (%d bytes, %v)", n, err)
	}
	b.Flush()
	expect(3)
	if directs.Load() != 1 { // and the writer, not woken, is still waiting
		t.Fatalf("%d direct writes for a batch of 3 records, want 1", directs.Load())
	}

	o.Mu.Lock()
	o.DirectMax = 100
	o.Mu.Unlock()
	deliver(&b, 2) // 128 bytes: over DirectMax, for the writer
	b.Flush()
	expect(2)
	if directs.Load() != 1 {
		t.Fatalf("a batch's Flush wrote %d bytes over DirectMax itself", 2*64)
	}

	// At DeferMax the writer is woken without waiting for the batch;
	// what comes after waits for the Flush again. (The writer that wrote
	// the two records must be back in Wait first: one still writing
	// would take what is appended meanwhile when it is done, and the
	// rest would stay under DeferMax until the Flush.)
	idle()
	deliver(&b, DeferMax/64+1)
	expect(DeferMax / 64)
	b.Flush()
	expect(1)
}
