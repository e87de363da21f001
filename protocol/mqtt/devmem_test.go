package mqtt

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// fleetDevice is a test device on a raw socket: no net.Conn, no
// goroutine, nothing on the test process's heap, so that the heap's
// growth is the broker's.
type fleetDevice struct{ fd int }

// dialFleetDevice connects as the fleet generator's devices do (MQTT
// 3.1.1, clean session, no keep-alive) and subscribes in one SUBSCRIBE
// to filters at qos, waiting for the CONNACK and SUBACK. The caller
// closes it (d.close): no cleanup per device on the test's heap.
func dialFleetDevice(t testing.TB, addr string, id string, filters []string, qos []byte) fleetDevice {
	t.Helper()
	host, port, err := splitHostPortNum(addr)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := fleetDevice{fd: fd}
	sa := syscall.SockaddrInet4{Addr: host, Port: port}
	for err = syscall.Connect(fd, &sa); err == syscall.EINTR; err = syscall.Connect(fd, &sa) {
	}
	if err != nil && err != syscall.EISCONN {
		t.Fatal(err)
	}
	tv := syscall.Timeval{Sec: 15}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	var body []byte
	body = benchString(body, "MQTT")
	body = append(body, 4, 0xC2, 0, 0) // user name, password, clean session; no keep-alive
	body = benchString(body, id)
	body = benchString(body, "guest")
	body = benchString(body, "guest")
	pkt := benchPacket(nil, 0x10, body)
	sub := binary.BigEndian.AppendUint16(nil, 1)
	for i, f := range filters {
		sub = benchString(sub, f)
		sub = append(sub, qos[i])
	}
	pkt = benchPacket(pkt, 0x82, sub)
	d.write(t, pkt)
	if first, b := d.read(t); first>>4 != 2 || len(b) < 2 || b[1] != 0 {
		t.Fatalf("%s: CONNACK %x %x", id, first, b)
	}
	if first, b := d.read(t); first>>4 != 9 || len(b) != 2+len(filters) {
		t.Fatalf("%s: SUBACK %x %x", id, first, b)
	} else {
		for i, g := range b[2:] {
			if g != qos[i] {
				t.Fatalf("%s: SUBACK granted %x", id, b[2:])
			}
		}
	}
	return d
}

func splitHostPortNum(addr string) ([4]byte, int, error) {
	var h [4]byte
	var p int
	_, err := fmt.Sscanf(addr, "%d.%d.%d.%d:%d", &h[0], &h[1], &h[2], &h[3], &p)
	return h, p, err
}

func (d fleetDevice) close() { _ = syscall.Close(d.fd) }

func (d fleetDevice) write(t testing.TB, b []byte) {
	t.Helper()
	for len(b) > 0 {
		n, err := syscall.Write(d.fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
}

// read reads one packet (a byte at a time for the header: the device
// keeps no buffer).
func (d fleetDevice) read(t testing.TB) (byte, []byte) {
	t.Helper()
	full := func(b []byte) {
		for len(b) > 0 {
			n, err := syscall.Read(d.fd, b)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || n == 0 {
				t.Fatalf("read: %d %v", n, err)
			}
			b = b[n:]
		}
	}
	var one [1]byte
	full(one[:])
	first := one[0]
	n, mul := 0, 1
	for {
		full(one[:])
		n += int(one[0]&0x7f) * mul
		if one[0]&0x80 == 0 {
			break
		}
		mul *= 128
	}
	b := make([]byte, n)
	full(b)
	return first, b
}

// liveHeap is the smallest HeapAlloc over a few collections.
func liveHeap() int64 {
	best := int64(-1)
	for range 4 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if v := int64(ms.HeapAlloc); best < 0 || v < best {
			best = v
		}
	}
	return best
}

// deviceHeap connects n fleet devices (each subscribed to a topic of its
// own at QoS 1 and to a broadcast filter at QoS 0, as tridentbench's
// mqtt-subscribed scenarios do), waits until every one is parked, and
// returns the live heap per device. With TRIDENT_DEVMEM_PROFILE set it
// writes a heap profile there.
func deviceHeap(t *testing.T, n int) (perDevice float64) {
	if os.Getenv("TRIDENT_DEVMEM_PROFILE") != "" {
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		defer func() { runtime.MemProfileRate = old }()
	}
	// The devices' waves (coming, and leaving as the test ends) arm the
	// server's give-back (giveback.go): let it run out before the test
	// ends, so that no collection of this server's runs during a later
	// test, which may have replaced giveBack. Registered first, this
	// runs last: after the server's shutdown.
	var s *Server
	t.Cleanup(func() {
		for deadline := time.Now().Add(10 * time.Second); s.giveBack.armed.Load(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("the server's give-back still armed 10 s after the test")
				return
			}
		}
	})
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) { s.giveBack.delay = 20 * time.Millisecond })
	// One device first: what every server makes once (the broadcast
	// filter's binding, the trie's nodes) is not a device's.
	devs := make([]fleetDevice, 0, n+1)
	t.Cleanup(func() {
		for _, d := range devs {
			d.close()
		}
	})
	devs = append(devs, dialFleetDevice(t, addr, "devmem-warm", []string{"devmem/dev/warm", "devmem/all/#"}, []byte{1, 0}))
	waitAllParked(t, s, 1)
	before := liveHeap()
	for i := range n {
		devs = append(devs, dialFleetDevice(t, addr, "devmem-"+strconv.Itoa(i),
			[]string{"devmem/dev/" + strconv.Itoa(i), "devmem/all/#"}, []byte{1, 0}))
	}
	waitAllParked(t, s, n+1)
	after := liveHeap()
	if p := os.Getenv("TRIDENT_DEVMEM_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
	return float64(after-before) / float64(n)
}

// waitAllParked waits until n connections are connected and parked.
func waitAllParked(t testing.TB, s *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		parked := 0
		for _, c := range s.conns.Snapshot() {
			if c.connected.Load() && c.parked.Load() {
				parked++
			}
		}
		if parked >= n {
			return
		}
	}
	t.Fatalf("fewer than %d connections parked", n)
}

// TestDeviceHeap: the live heap per idle subscribed device (2,000
// devices, each subscribed to its own topic at QoS 1 and to a shared
// broadcast filter at QoS 0) stays under a bound set just above what it
// is: a regression guard for issue 42's memory per device.
// TRIDENT_DEVMEM_N sets the number of devices.
func TestDeviceHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("connects 2,000 devices")
	}
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("TRIDENT_DEVMEM_N")); err == nil && v > 0 {
		n = v
	}
	per := deviceHeap(t, n)
	t.Logf("live heap per idle subscribed device: %.0f B (%d devices)", per, n)
	// About 2,440 B when the bound was set (2,607 B before the
	// connection's and the session's rare fields moved behind pointers
	// and the subscription's binding key went; 3,434 B before issue 42's
	// second slimming): a bound a little above, so that a field more in a
	// size class every device pays, or an allocation more a device, fails
	// here.
	const bound = 2520
	if per > bound {
		t.Fatalf("live heap per idle subscribed device %.0f B, above the bound of %d B", per, bound)
	}
}

// TestConnectionSlotGivenBack: a device holds one slot under the
// connection limits while connected and none once it has gone; a
// CONNECT over the limit is refused and holds none.
func TestConnectionSlotGivenBack(t *testing.T) {
	s, addr := testServer(t)
	lim := s.b.Limiter()
	lim.Set(exchange.Limits{MaxConnectionsPerUser: 1})
	count := func() int { u, _ := lim.Connections("guest", "/"); return u }
	d := dialFleetDevice(t, addr, "slot-1", []string{"slot/1"}, []byte{1})
	if n := count(); n != 1 {
		t.Fatalf("%d slots held by one device", n)
	}
	// Over the limit: refused (3.1.1: server unavailable, 3).
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	over := fleetDevice{fd: fd}
	defer over.close()
	host, port, _ := splitHostPortNum(addr)
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Addr: host, Port: port}); err != nil {
		t.Fatal(err)
	}
	var body []byte
	body = benchString(body, "MQTT")
	body = append(body, 4, 0xC2, 0, 0)
	body = benchString(body, "slot-2")
	body = benchString(body, "guest")
	body = benchString(body, "guest")
	over.write(t, benchPacket(nil, 0x10, body))
	if first, b := over.read(t); first>>4 != 2 || len(b) < 2 || b[1] != 3 {
		t.Fatalf("CONNACK over the limit: %x %x", first, b)
	}
	d.close()
	for deadline := time.Now().Add(10 * time.Second); count() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots held after the devices left", count())
		}
	}
	d = dialFleetDevice(t, addr, "slot-3", []string{"slot/3"}, []byte{1})
	d.close()
}

// TestConnectionNameOnDemand: an idle device's connection holds no name
// until one is asked for; then the management API lists it by a name of
// its addresses and number, the same each time, by which it is closed.
func TestConnectionNameOnDemand(t *testing.T) {
	s, addr := testServer(t)
	d := dialFleetDevice(t, addr, "named", []string{"named/t"}, []byte{1})
	defer d.close()
	c := serverConn(t, s, "named")
	if c.nameP.Load() != nil {
		t.Fatal("a connection nobody asked about made its name")
	}
	info := s.Connections()
	if len(info) != 1 {
		t.Fatalf("%d connections listed", len(info))
	}
	name := info[0].Name
	want := c.nc.RemoteAddr().String() + " -> " + c.nc.LocalAddr().String() + " #"
	if len(name) <= len(want) || name[:len(want)] != want {
		t.Fatalf("name %q, want %q and a number", name, want)
	}
	if again := s.Connections()[0].Name; again != name {
		t.Fatalf("name %q, then %q", name, again)
	}
	if !s.CloseConnection(name, "") {
		t.Fatal("CloseConnection did not find the connection by its name")
	}
	var b [1]byte
	if n, err := syscall.Read(d.fd, b[:]); n != 0 || err != nil {
		t.Fatalf("after CloseConnection: read %d %v, want the end of the stream", n, err)
	}
}

// TestPubrelResentAfterReconnect: a persistent session's outbound QoS 2
// message that its subscriber answered with PUBREC, and got PUBREL for,
// has its PUBREL resent when the subscriber comes back (the session
// keeps the packet id while disconnected: sessionRare.relOut), and the
// message is not delivered again.
func TestPubrelResentAfterReconnect(t *testing.T) {
	_, addr := testServer(t)
	dial := func() (net.Conn, []byte) {
		nc, ack := rawConnect3(t, addr, "guest", "guest", "rel-sub", 0xC0, 0, 10*time.Second) // not clean
		if ack[1] != 0 {
			t.Fatalf("CONNACK %x", ack)
		}
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		return nc, ack
	}
	sub, _ := dial()
	body := binary.BigEndian.AppendUint16(nil, 1)
	body = append(benchString(body, "rel/t"), 2)
	if _, err := sub.Write(benchPacket(nil, 0x82, body)); err != nil {
		t.Fatal(err)
	}
	if first, b := benchReadPacket(t, sub); first>>4 != 9 || b[2] != 2 {
		t.Fatalf("SUBACK %x %x", first, b)
	}
	pub := benchMQTTDial(t, addr, "rel-pub", 4, "")
	_ = pub.SetDeadline(time.Now().Add(10 * time.Second))
	pb := binary.BigEndian.AppendUint16(benchString(nil, "rel/t"), 9)
	if _, err := pub.Write(benchPacket(nil, 0x34, append(pb, "once"...))); err != nil {
		t.Fatal(err)
	}
	if first, _ := benchReadPacket(t, pub); first>>4 != 5 {
		t.Fatalf("PUBREC to the publisher: %x", first)
	}
	if _, err := pub.Write([]byte{0x62, 2, 0, 9}); err != nil {
		t.Fatal(err)
	}
	if first, _ := benchReadPacket(t, pub); first>>4 != 7 {
		t.Fatalf("PUBCOMP to the publisher: %x", first)
	}
	first, b := benchReadPacket(t, sub)
	if first>>4 != 3 || (first>>1)&3 != 2 {
		t.Fatalf("PUBLISH to the subscriber: %x", first)
	}
	n := int(binary.BigEndian.Uint16(b))
	pid := b[2+n : 4+n]
	if _, err := sub.Write([]byte{0x50, 2, pid[0], pid[1]}); err != nil { // PUBREC
		t.Fatal(err)
	}
	if first, b := benchReadPacket(t, sub); first != 0x62 || b[0] != pid[0] || b[1] != pid[1] {
		t.Fatalf("PUBREL %x %x", first, b)
	}
	sub.Close() // without PUBCOMP

	var sub2 net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var ack []byte
		sub2, ack = dial()
		if ack[0]&1 == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("session not present on reconnect")
		}
		sub2.Close()
	}
	first, b = benchReadPacket(t, sub2)
	if first != 0x62 || b[0] != pid[0] || b[1] != pid[1] {
		t.Fatalf("after reconnect: %x %x, want PUBREL for packet id %x", first, b, pid)
	}
}

// TestSessionTimesKept: a persistent MQTT 5 session whose connection
// ended shows when it expires (sessionRare.expiresAt) and its record says
// when its connection ended (session.offAt).
func TestSessionTimesKept(t *testing.T) {
	var mu sync.Mutex
	records := map[string][]byte{}
	s, addr := testServerWith(t, &memStore{m: map[string][]byte{}, onWrite: func(key string, val []byte) {
		mu.Lock()
		records[key] = append([]byte(nil), val...)
		mu.Unlock()
	}})
	nc := rawConnect5Expiry(t, addr, "times", 60)
	start := time.Now()
	nc.Close()
	var info SessionInfo
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var ok bool
		if info, ok = s.Session("/", "times"); ok && !info.Connected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session is not shown disconnected")
		}
	}
	if lo, hi := start.Add(50*time.Second), time.Now().Add(61*time.Second); info.ExpiresAt.Before(lo) || info.ExpiresAt.After(hi) {
		t.Fatalf("expires at %v, want 60 s after %v", info.ExpiresAt, start)
	}
	// In a cluster the record is written as the connection ends
	// (orphan.go); standalone, write it here.
	s.mu.Lock()
	se := s.sessions["/\x00times"]
	s.mu.Unlock()
	if se == nil {
		t.Fatal("no session")
	}
	if err := s.saveSession(se); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	val := records[sessionPrefix+"/\x00times"]
	mu.Unlock()
	var rec sessionRecord
	if err := json.Unmarshal(val, &rec); err != nil {
		t.Fatal(err)
	}
	if off := time.UnixMilli(rec.Off); off.Before(start.Add(-time.Second)) || off.After(time.Now()) {
		t.Fatalf("record's end %v, want about %v", off, start)
	}
}

// TestSessionKeyParts: a session's vhost and client id are cut from its
// key, whatever they hold but a NUL.
func TestSessionKeyParts(t *testing.T) {
	for _, c := range []struct{ vhost, id string }{{"/", "dev-1"}, {"a/b:c", "x/y:z"}, {"", ""}, {"vh", ""}, {"", "id"}} {
		se := newSession(c.vhost, c.id)
		if se.vhost() != c.vhost || se.clientID() != c.id {
			t.Errorf("session of %q %q: vhost %q, client id %q", c.vhost, c.id, se.vhost(), se.clientID())
		}
		if want := "mqtt-subscription-" + c.id + "qos1"; se.qname != want {
			t.Errorf("queue %q, want %q", se.qname, want)
		}
	}
}

// rawConnect5Expiry connects MQTT 5 client id (guest, not clean) with a
// session expiry interval of secs seconds over a raw socket, and reads
// its CONNACK.
func rawConnect5Expiry(t *testing.T, addr, id string, secs byte) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	var body []byte
	body = benchString(body, "MQTT")
	body = append(body, 5, 0xC0, 0, 0)          // MQTT 5, user name, password, not clean
	body = append(body, 5, 0x11, 0, 0, 0, secs) // session expiry interval
	body = benchString(body, id)
	body = benchString(body, "guest")
	body = benchString(body, "guest")
	if _, err := nc.Write(benchPacket(nil, 0x10, body)); err != nil {
		t.Fatal(err)
	}
	if first, _ := benchReadPacket(t, nc); first>>4 != 2 {
		t.Fatalf("CONNACK %x", first)
	}
	return nc
}
