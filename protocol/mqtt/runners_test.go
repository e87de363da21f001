package mqtt

import (
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// peakGoroutines samples runtime.NumGoroutine until stop is closed and
// returns the most it saw.
func peakGoroutines(stop <-chan struct{}) <-chan int {
	res := make(chan int, 1)
	go func() {
		peak := 0
		for {
			peak = max(peak, runtime.NumGoroutine())
			select {
			case <-stop:
				res <- peak
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	return res
}

// broadcastTo publishes n QoS 0 messages to topic and waits until every
// device has read them.
func broadcastTo(t *testing.T, addr, topic string, n int, devs []fleetDevice) {
	t.Helper()
	pub := benchMQTTDial(t, addr, "bcast-"+strconv.FormatInt(time.Now().UnixNano(), 36), 4, "")
	var pkt []byte
	for i := range n {
		pkt = benchPacket(pkt, 0x30, append(benchString(nil, topic), byte('0'+i)))
	}
	if _, err := pub.Write(pkt); err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		for range n {
			if first, _ := d.read(t); first>>4 != 3 {
				t.Fatalf("packet %x, want a PUBLISH", first)
			}
		}
	}
}

// TestBurstGoroutinesBounded: a broadcast to a fleet of parked devices
// runs at most about the runners' bound of goroutines at once, not one
// per device (the runtime keeps the descriptor of each for good), and
// reaches every device.
func TestBurstGoroutinesBounded(t *testing.T) {
	const n, bound = 600, 16
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) { s.run.setBase(bound) })
	devs := make([]fleetDevice, 0, n)
	t.Cleanup(func() {
		for _, d := range devs {
			d.close()
		}
	})
	for i := range n {
		devs = append(devs, dialFleetDevice(t, addr, "gb-"+strconv.Itoa(i), []string{"gb/all/#"}, []byte{0}))
	}
	waitAllParked(t, s, n)
	idle := runtime.NumGoroutine()
	stop := make(chan struct{})
	peak := peakGoroutines(stop)
	broadcastTo(t, addr, "gb/all/x", 3, devs)
	close(stop)
	// Beside the bound: the publisher's reader and writer, the sampler,
	// and a stall's bound more on a machine that did not run the test
	// for runnersStall.
	over := <-peak - idle
	t.Logf("at most %d goroutines more than idle during a broadcast to %d devices (bound %d)", over, n, bound)
	if over > 2*bound+10 {
		t.Fatalf("%d goroutines more than idle during a broadcast to %d devices, want about %d", over, n, bound)
	}
}

// TestRunnersStuckDoNotHoldOthers: with every runner stuck writing to a
// client that reads nothing, another device still gets its message (the
// bound grows after runnersStall), and the bound is back to its base
// once the stuck one has gone.
func TestRunnersStuckDoNotHoldOthers(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) { s.run.setBase(1) })
	stuck := dialFleetDevice(t, addr, "stuck", []string{"stuck/t"}, []byte{0})
	defer stuck.close()
	probe := dialFleetDevice(t, addr, "probe", []string{"probe/t"}, []byte{0})
	defer probe.close()
	sc := serverConn(t, s, "stuck")
	pub := benchMQTTDial(t, addr, "stuck-pub", 4, "")
	// Fill the stuck device's socket until its writer waits on it: it
	// still writes, its consumer paused (the output over High), a while
	// later.
	payload := strings.Repeat("x", 32<<10)
	pkt := benchPacket(nil, 0x30, append(benchString(nil, "stuck/t"), payload...))
	waiting := func() bool {
		sc.ob.Mu.Lock()
		defer sc.ob.Mu.Unlock()
		return sc.ob.Active() && len(sc.ob.Paused) > 0
	}
	_ = pub.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for i := 0; ; i++ {
		if i == 2000 {
			t.Fatal("the stuck device's writer does not wait: the test measures nothing")
		}
		if _, err := pub.Write(pkt); err != nil {
			t.Fatal(err)
		}
		if i%16 != 15 {
			continue
		}
		if waiting() {
			time.Sleep(100 * time.Millisecond)
			if waiting() {
				break
			}
		}
	}
	if live := s.run.live.Load(); live < 1 {
		t.Fatalf("%d runners alive while the stuck writer waits", live)
	}
	pkt = benchPacket(nil, 0x30, append(benchString(nil, "probe/t"), "hi"...))
	if _, err := pub.Write(pkt); err != nil {
		t.Fatal(err)
	}
	tv := syscall.Timeval{Sec: 5}
	_ = syscall.SetsockoptTimeval(probe.fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	first, b := probe.read(t)
	if first>>4 != 3 || !strings.HasSuffix(string(b), "hi") {
		t.Fatalf("probe got %x %q", first, b)
	}
	if l := s.run.limit.Load(); l < 2 {
		t.Fatalf("bound %d after a stall, want it grown", l)
	}
	stuck.close()
	for deadline := time.Now().Add(10 * time.Second); s.run.limit.Load() != 1 || s.run.live.Load() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bound %d with %d runners alive once the stuck device left, want back to 1", s.run.limit.Load(), s.run.live.Load())
		}
	}
}

// TestReceiveOnlyQueuesTrimmed: devices that only receive (QoS 0
// broadcasts: their readers never wake) keep none of the room the burst
// took in their queues once their writers are done.
func TestReceiveOnlyQueuesTrimmed(t *testing.T) {
	const n = 400
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) { s.run.setBase(4) })
	devs := make([]fleetDevice, 0, n)
	t.Cleanup(func() {
		for _, d := range devs {
			d.close()
		}
	})
	for i := range n {
		devs = append(devs, dialFleetDevice(t, addr, "rx-"+strconv.Itoa(i),
			[]string{"rx/dev/" + strconv.Itoa(i), "rx/all/#"}, []byte{1, 0}))
	}
	waitAllParked(t, s, n)
	// A first publish copies the routing table (exchange's route table),
	// which is not the devices'.
	broadcastTo(t, addr, "rx/none", 1, nil)
	time.Sleep(50 * time.Millisecond)
	before := liveHeap()
	broadcastTo(t, addr, "rx/all/x", 8, devs)
	for _, c := range s.conns.Snapshot() {
		waitWriterGone(t, c)
	}
	after := liveHeap()
	per := float64(after-before) / n
	t.Logf("live heap per device after a QoS 0 broadcast: %+.0f B", per)
	if per > 150 {
		t.Fatalf("a broadcast left %.0f B per receive-only device", per)
	}
}

// TestRunnersWritersFirst: past the bound, a waiting writer starts
// before a reader that waited longer (a reader closing its connection
// waits for the writer: readers first could hold every runner waiting
// for writers still on the list).
func TestRunnersWritersFirst(t *testing.T) {
	var r runners
	r.setBase(1)
	r.live.Store(1) // the bound is reached: starts wait
	rc, wc := &conn{}, &conn{}
	r.start(rc, runRead)
	r.start(wc, runWrite)
	first, ok1 := r.next(false)
	second, ok2 := r.next(false)
	if !ok1 || !ok2 || first.c != wc || first.kind != runWrite || second.c != rc || second.kind != runRead {
		t.Fatalf("waiting starts taken as %+v, %+v; want the writer, then the reader", first, second)
	}
	if _, ok := r.next(false); ok || r.queued.Load() != 0 {
		t.Fatal("a start left on the list")
	}
}
