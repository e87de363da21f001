package mqtt

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"
)

// pingDial connects a raw MQTT 3.1.1 client with keep-alive seconds.
func pingDial(t *testing.T, addr, id string, keepalive uint16) net.Conn {
	t.Helper()
	nc, ack := rawConnect3(t, addr, "guest", "guest", id, 0xC2, keepalive, 30*time.Second) // user name, password, clean session
	if ack[1] != 0 {
		t.Fatalf("CONNACK: %x", ack)
	}
	return nc
}

var pingreq = []byte{packets.Pingreq << 4, 0}

// expectPingresps reads n PINGRESPs from nc.
func expectPingresps(t *testing.T, nc net.Conn, n int) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i := range n {
		if first, body := benchReadPacket(t, nc); first != packets.Pingresp<<4 || len(body) != 0 {
			t.Fatalf("PINGRESP %d of %d: %x %x", i+1, n, first, body)
		}
	}
}

// TestLoopAnswersPings: the PINGREQs of a parked connection are answered
// by the event loop itself, one at a time and several in one write: no
// reader is taken from the pool, the connection stays parked, and its
// byte counters count them as the reader's path would.
func TestLoopAnswersPings(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) { s.parkAfter = time.Minute })
	dev := pingDial(t, addr, "ping-dev", 60)
	c := serverConn(t, s, "ping-dev")
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked after CONNECT")
	}
	readers, pings := s.parkedReaders.Load(), s.loopPings.Load()
	recv, sent := c.recvBytes.Load(), c.sentBytes.Load()
	const n = 50
	for i := range n {
		if _, err := dev.Write(pingreq); err != nil {
			t.Fatal(err)
		}
		expectPingresps(t, dev, 1)
		if !waitParked(c, 10*time.Second) {
			t.Fatalf("ping %d: not parked again", i+1)
		}
	}
	// Several in one write: as many PINGRESPs.
	if _, err := dev.Write([]byte{0xC0, 0, 0xC0, 0, 0xC0, 0}); err != nil {
		t.Fatal(err)
	}
	expectPingresps(t, dev, 3)
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked again after three PINGREQs in one write")
	}
	if got := s.parkedReaders.Load() - readers; got != 0 {
		t.Fatalf("%d readers taken for %d PINGREQs of a parked connection", got, n+3)
	}
	if got := s.loopPings.Load() - pings; got != n+3 {
		t.Fatalf("the event loop answered %d PINGREQs of %d", got, n+3)
	}
	if r, w := c.recvBytes.Load()-recv, c.sentBytes.Load()-sent; r != 2*(n+3) || w != 2*(n+3) {
		t.Fatalf("counted %d bytes received and %d sent for %d PINGREQs and PINGRESPs", r, w, n+3)
	}
	if info := s.Connections(); len(info) != 1 || info[0].RecvBytes != c.recvBytes.Load() || info[0].SentBytes != c.sentBytes.Load() {
		t.Fatalf("management's view: %+v", info)
	}
}

// TestLoopPingThenPublish: bytes after the PINGREQs, in the same TCP
// write, go to the reader with the PINGREQs ahead of them: the PINGRESP,
// the PUBLISH's PUBACK and its delivery to a subscriber all come, in
// order, with the packet that follows split across writes and a PUBLISH
// ahead of the PINGREQ too.
func TestLoopPingThenPublish(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) { s.parkAfter = time.Minute })
	sub := benchMQTTDial(t, addr, "pp-sub", 4, "pp/t")
	dev := pingDial(t, addr, "pp-dev", 60)
	c := serverConn(t, s, "pp-dev")
	publish := func(pid uint16, payload string) []byte {
		body := benchString(nil, "pp/t")
		body = binary.BigEndian.AppendUint16(body, pid)
		return benchPacket(nil, 0x32, append(body, payload...)) // QoS 1
	}
	expectPuback := func(pid uint16) {
		t.Helper()
		first, body := benchReadPacket(t, dev)
		if first>>4 != packets.Puback || len(body) < 2 || binary.BigEndian.Uint16(body) != pid {
			t.Fatalf("PUBACK %d: %x %x", pid, first, body)
		}
	}
	expectDelivery := func(payload string) {
		t.Helper()
		_ = sub.SetReadDeadline(time.Now().Add(30 * time.Second))
		first, body := benchReadPacket(t, sub)
		if first>>4 != packets.Publish || len(body) < 6 || string(body[6:]) != payload {
			t.Fatalf("delivery %q: %x %q", payload, first, body)
		}
	}
	type step struct {
		name   string
		writes [][]byte // written in turn, a pause between them
		expect func()
	}
	pub1, pub2, pub3 := publish(1, "one"), publish(2, "two"), publish(3, "three")
	steps := []step{
		{"PINGREQ and PUBLISH in one write", [][]byte{append(append([]byte{}, pingreq...), pub1...)}, func() {
			expectPingresps(t, dev, 1)
			expectPuback(1)
			expectDelivery("one")
		}},
		{"PINGREQ, then half a PUBLISH in one write, its rest later", [][]byte{append(append([]byte{}, pingreq...), pub2[:5]...), pub2[5:]}, func() {
			expectPingresps(t, dev, 1)
			expectPuback(2)
			expectDelivery("two")
		}},
		{"PUBLISH and two PINGREQs in one write", [][]byte{append(append(append([]byte{}, pub3...), pingreq...), pingreq...)}, func() {
			expectPuback(3)
			expectPingresps(t, dev, 2)
			expectDelivery("three")
		}},
		{"PINGREQ split across two writes", [][]byte{pingreq[:1], pingreq[1:]}, func() {
			expectPingresps(t, dev, 1)
		}},
	}
	for _, st := range steps {
		if !waitParked(c, 10*time.Second) {
			t.Fatalf("%s: not parked before", st.name)
		}
		for i, w := range st.writes {
			if i > 0 {
				time.Sleep(200 * time.Millisecond)
			}
			if _, err := dev.Write(w); err != nil {
				t.Fatal(err)
			}
		}
		_ = dev.SetReadDeadline(time.Now().Add(30 * time.Second))
		st.expect()
	}
	// The connection is still served by the loop afterwards.
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked at the end")
	}
	pings := s.loopPings.Load()
	if _, err := dev.Write(pingreq); err != nil {
		t.Fatal(err)
	}
	expectPingresps(t, dev, 1)
	if s.loopPings.Load() != pings+1 {
		t.Fatal("the event loop no longer answers the connection's PINGREQs")
	}
	if got := c.recvPublish.Load(); got != 3 {
		t.Fatalf("%d publishes counted, 3 sent", got)
	}
}

// TestLoopKeepAlive: a parked client that only pings (every 400 ms, keep-
// alive 1 s, so for several times 1.5 s) stays connected, its PINGREQs
// answered by the loop; a silent one is disconnected after 1.5 times its
// keep-alive.
func TestLoopKeepAlive(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) { s.parkAfter = time.Minute })
	pinger := pingDial(t, addr, "ka-pinger", 1)
	silent := pingDial(t, addr, "ka-silent", 1)
	c := serverConn(t, s, "ka-pinger")
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked")
	}
	pings := s.loopPings.Load()
	start := time.Now()
	silentGone := make(chan time.Duration, 1)
	go func() {
		_ = silent.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := io.ReadFull(silent, make([]byte, 1))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			silentGone <- -1
			return
		}
		silentGone <- time.Since(start)
	}()
	// A PINGREQ written more than 1.2 s after the last answer (the test
	// stalled: CI runs packages side by side on two cores) may find the
	// keep-alive's timer (1.5 s) fired and a reader on the socket, which
	// answers it: such are counted (late) and may be the reader's; every
	// other one must be the loop's.
	sent, late := uint64(0), uint64(0)
	last := time.Now()
	for time.Since(start) < 6*time.Second {
		time.Sleep(400 * time.Millisecond)
		if !waitParked(c, 10*time.Second) {
			t.Fatal("the pinger is not parked")
		}
		if time.Since(last) > 1200*time.Millisecond {
			late++
		}
		if _, err := pinger.Write(pingreq); err != nil {
			t.Fatalf("after %v: %v", time.Since(start), err)
		}
		sent++
		expectPingresps(t, pinger, 1)
		last = time.Now()
	}
	// Every one, also those past 1.5 times the keep-alive after the last
	// packet a reader read (the socket's read deadline is refreshed too).
	if got := s.loopPings.Load() - pings; got > sent || got+late < sent || late*2 > sent {
		t.Fatalf("the loop answered %d of the pinger's %d PINGREQs (%d written late)", got, sent, late)
	}
	if !c.connected.Load() {
		t.Fatal("the pinger was disconnected")
	}
	select {
	case d := <-silentGone:
		if d < 0 {
			t.Fatal("the silent client was not disconnected")
		}
		if d < time.Second {
			t.Fatalf("the silent client was disconnected after %v, before its keep-alive", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the silent client was not disconnected")
	}
}

// TestLoopPingsPaho: a paho client with a one-second keep-alive, idle
// (so parked) for several seconds, gets every PINGRESP (paho drops the
// connection when one is late) from the event loop, and still
// publishes and receives afterwards.
func TestLoopPingsPaho(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) { s.parkAfter = time.Minute })
	var lost atomic.Bool
	got := make(chan string, 4)
	opts := mqtt3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("paho-pinger").
		SetUsername("guest").SetPassword("guest").SetKeepAlive(time.Second).SetPingTimeout(time.Second).
		SetAutoReconnect(false).SetConnectionLostHandler(func(mqtt3.Client, error) { lost.Store(true) })
	cl := mqtt3.NewClient(opts)
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer cl.Disconnect(100)
	if tok := cl.Subscribe("paho/ping", 1, func(_ mqtt3.Client, m mqtt3.Message) { got <- string(m.Payload()) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	c := serverConn(t, s, "paho-pinger")
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked")
	}
	pings := s.loopPings.Load()
	time.Sleep(8 * time.Second)
	if n := s.loopPings.Load() - pings; n < 4 {
		t.Fatalf("the loop answered %d PINGREQs in 8 s of a one-second keep-alive", n)
	}
	if lost.Load() || !cl.IsConnectionOpen() || !c.connected.Load() {
		t.Fatal("the client lost its connection")
	}
	if tok := cl.Publish("paho/ping", 1, false, "after"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	select {
	case m := <-got:
		if m != "after" {
			t.Fatalf("received %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery after the pings")
	}
}

// TestLoopPingsSocketFull: when the socket cannot take the PINGRESPs at
// once (its send buffer is full), they are not lost: a writer started
// with the loop's turn writes them after what the socket holds, and the
// sent bytes count them.
func TestLoopPingsSocketFull(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv := a.(*net.TCPConn)
	_ = srv.SetWriteBuffer(4096)
	_ = client.(*net.TCPConn).SetReadBuffer(4096)
	rc, err := srv.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// Fill the socket until it takes no more.
	filler := make([]byte, 1024)
	for i := range filler {
		filler[i] = 'x'
	}
	filled := 0
	if err := rc.Write(func(fd uintptr) bool {
		for {
			n, err := syscall.Write(int(fd), filler)
			if n > 0 {
				filled += n
			}
			if err == syscall.EAGAIN {
				return true
			}
			if err != nil && err != syscall.EINTR {
				t.Error(err)
				return true
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	c := &conn{s: &Server{streamWindow: time.Second}, nc: srv}
	c.runWriter = c.runWriterLoop
	if !c.answerPings(p.loops[0], rc, 3) {
		t.Fatal("answerPings refused an open connection")
	}
	// The client reads everything: the filler, then three PINGRESPs.
	want := filled + 6
	got := make([]byte, 0, want)
	buf := make([]byte, 64<<10)
	_ = client.SetReadDeadline(time.Now().Add(30 * time.Second))
	for len(got) < want {
		n, err := client.Read(buf)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", len(got), want, err)
		}
		got = append(got, buf[:n]...)
	}
	for i, b := range got[:filled] {
		if b != 'x' {
			t.Fatalf("byte %d of the filler is %x", i, b)
		}
	}
	if tail := got[filled:]; string(tail) != "\xd0\x00\xd0\x00\xd0\x00" {
		t.Fatalf("after the filler: %x, want three PINGRESPs", tail)
	}
	waitWriterGone(t, c)
	if c.sentBytes.Load() != 6 {
		t.Fatalf("%d bytes counted sent for three PINGRESPs", c.sentBytes.Load())
	}
}
