//go:build linux

package main

// mqtt-subscribed-1k, -10k, -18k (issue 42's fleet measure): N clean-session
// MQTT 3.1.1 clients, as many IoT devices would be, each subscribed to a
// topic of its own (QoS 1) and to a broadcast filter shared by all (QoS 0).
// 18,000 is the most one process may hold here (open-file limit 20,000).
// Against a broker on this machine (found by its listening port) it
// measures, in order:
//   - connect + subscribe (two filters in one SUBSCRIBE), 32 clients at a time;
//   - the broker's resident memory per subscribed connection 5 s and 35 s
//     after the last client subscribed, every client idle (keep-alive off);
//   - broadcast: 5 QoS 0 messages to the shared filter, each reaching every
//     client (deliveries a second until all arrived);
//   - unicast: one QoS 1 message to each client's own topic (publisher
//     pipelined), messages a second until every client has its message;
//   - telemetry in: one QoS 1 message from each client to one subscriber,
//     messages a second until the subscriber has them all;
//   - keep-alive sweep: a PINGREQ from every client, until every PINGRESP
//     arrived;
//   - resident memory after the bursts, 30 s later, and 30 s after every
//     client disconnected.
//
// The generator holds no goroutine per device: the devices are raw
// non-blocking sockets read by two epoll loops, so what it measures is the
// broker, not itself. Every delivery is counted by its client; the
// scenario fails if any is missing. The table's "published" column is the
// connect+subscribe rate, "consumed" the broadcast delivery rate; the rest
// goes to stderr.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var mqttManyScenarios = []Scenario{
	mqttManyScenario{name: "mqtt-subscribed-10k", conns: 10000, broadcasts: 5},
	mqttManyScenario{name: "mqtt-subscribed-1k", conns: 1000, broadcasts: 5, hidden: true},
	mqttManyScenario{name: "mqtt-subscribed-18k", conns: 18000, broadcasts: 5, hidden: true},
}

type mqttManyScenario struct {
	name       string
	conns      int
	broadcasts int
	hidden     bool // run only when named in --scenarios
}

func (s mqttManyScenario) Name() string   { return s.name }
func (s mqttManyScenario) Scheme() string { return "mqtt" }

// fleetDev is one device: a raw socket and what its loop counted.
type fleetDev struct {
	fd        int
	pend      []byte // a partial packet, nil usually
	broadcast atomic.Int32
	own       atomic.Int32
	pubacks   atomic.Int32
	pingresps atomic.Int32
}

// fleet is the devices and the epoll loops that read them.
type fleet struct {
	devs  []*fleetDev
	epfds [2]int
	stop  atomic.Bool
	wg    sync.WaitGroup
	errs  atomic.Int64 // read errors and protocol surprises
}

func newFleet(n int) (*fleet, error) {
	f := &fleet{devs: make([]*fleetDev, n)}
	for i := range f.epfds {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return nil, err
		}
		f.epfds[i] = fd
	}
	for i := range f.epfds {
		f.wg.Go(func() { f.loop(f.epfds[i]) })
	}
	return f, nil
}

// close closes every device and the loops.
func (f *fleet) close() {
	for _, d := range f.devs {
		if d != nil && d.fd >= 0 {
			syscall.Close(d.fd)
			d.fd = -1
		}
	}
	f.stop.Store(true)
	f.wg.Wait()
	for _, fd := range f.epfds {
		syscall.Close(fd)
	}
}

// loop reads the devices registered with epfd until the fleet stops.
func (f *fleet) loop(epfd int) {
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 64<<10)
	var acks []byte
	for !f.stop.Load() {
		n, err := syscall.EpollWait(epfd, events, 100)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			d := f.devs[ev.Fd]
			if d == nil || d.fd < 0 {
				continue
			}
			r, err := syscall.Read(d.fd, buf)
			if err == syscall.EAGAIN || err == syscall.EINTR {
				continue
			}
			if err != nil || r == 0 {
				_ = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_DEL, d.fd, nil)
				continue
			}
			data := buf[:r]
			if d.pend != nil {
				data = append(d.pend, data...)
				d.pend = nil
			}
			acks = acks[:0]
			for len(data) > 0 {
				first, body, used, ok := splitMQTT(data)
				if used < 0 {
					f.errs.Add(1)
					break
				}
				if !ok {
					d.pend = append([]byte(nil), data...)
					break
				}
				data = data[used:]
				acks = d.handle(first, body, acks)
			}
			if len(acks) > 0 {
				writeAll(d.fd, acks)
			}
		}
	}
}

// handle counts one packet; a QoS 1 PUBLISH's PUBACK is appended to acks.
func (d *fleetDev) handle(first byte, body, acks []byte) []byte {
	switch first >> 4 {
	case mqttPuback:
		d.pubacks.Add(1)
	case 13: // PINGRESP
		d.pingresps.Add(1)
	case mqttPublish:
		if len(body) < 2 {
			return acks
		}
		tl := int(binary.BigEndian.Uint16(body))
		if 2+tl > len(body) {
			return acks
		}
		topic := body[2 : 2+tl]
		if (first>>1)&3 > 0 && len(body) >= 4+tl {
			acks = append(acks, mqttPuback<<4, 2, body[2+tl], body[3+tl])
		}
		if n := len(topic); n >= 2 && topic[n-2] == '/' && topic[n-1] == 'x' {
			d.broadcast.Add(1)
		} else {
			d.own.Add(1)
		}
	}
	return acks
}

// splitMQTT returns the first whole packet of b and its length; ok false
// if it is not all there, used < 0 if the length is malformed.
func splitMQTT(b []byte) (first byte, body []byte, used int, ok bool) {
	if len(b) < 2 {
		return 0, nil, 0, false
	}
	n, mul, i := 0, 1, 1
	for ; ; i++ {
		if i == 5 {
			return 0, nil, -1, false
		}
		if i >= len(b) {
			return 0, nil, 0, false
		}
		n += int(b[i]&0x7f) * mul
		mul *= 128
		if b[i]&0x80 == 0 {
			break
		}
	}
	end := i + 1 + n
	if end > len(b) {
		return 0, nil, 0, false
	}
	return b[0], b[i+1 : end], end, true
}

// writeAll writes p to a non-blocking socket, waiting out a full one.
func writeAll(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := syscall.Write(fd, p)
		if err == syscall.EAGAIN || err == syscall.EINTR {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// connect opens device i from 127.0.0.(2+i%200), sends CONNECT and
// SUBSCRIBE, waits for CONNACK and SUBACK (blocking), then hands the
// socket, non-blocking, to a loop.
func (f *fleet) connect(addr *net.TCPAddr, i int, id, user, pass string, filters []string, qos []byte) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := &fleetDev{fd: fd}
	f.devs[i] = d
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, byte(2 + i%200)}}); err != nil {
		return err
	}
	var sa syscall.SockaddrInet4
	copy(sa.Addr[:], addr.IP.To4())
	sa.Port = addr.Port
	err = syscall.Connect(fd, &sa)
	for err == syscall.EINTR || err == syscall.EALREADY { // a signal: the connect goes on
		time.Sleep(time.Millisecond)
		err = syscall.Connect(fd, &sa)
	}
	if err != nil && err != syscall.EISCONN {
		return err
	}
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	tv := syscall.Timeval{Sec: 15}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	pkt := mqttConnectPacket(nil, id, user, pass)
	sub := binary.BigEndian.AppendUint16(nil, 1)
	for j, flt := range filters {
		sub = mqttString(sub, flt)
		sub = append(sub, qos[j])
	}
	pkt = mqttPacket(pkt, mqttSubscribe<<4|0x02, sub)
	if err := writeAll(fd, pkt); err != nil {
		return err
	}
	var in []byte
	buf := make([]byte, 512)
	for _, want := range []byte{mqttConnack, mqttSuback} {
		for {
			first, b, used, ok := splitMQTT(in)
			if used < 0 {
				return errors.New("bad packet length")
			}
			if ok {
				in = in[used:]
				if first>>4 != want {
					return fmt.Errorf("packet type %d, want %d", first>>4, want)
				}
				if want == mqttConnack && (len(b) < 2 || b[1] != 0) {
					return fmt.Errorf("connect refused: %x", b)
				}
				if want == mqttSuback && (len(b) < 2+len(filters) || slicesHasFailure(b[2:])) {
					return fmt.Errorf("subscribe refused: %x", b)
				}
				break
			}
			n, err := syscall.Read(fd, buf)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if n == 0 {
				return io.ErrUnexpectedEOF
			}
			in = append(in, buf[:n]...)
		}
	}
	if len(in) > 0 {
		d.pend = append([]byte(nil), in...)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		return err
	}
	return syscall.EpollCtl(f.epfds[i%2], syscall.EPOLL_CTL_ADD, fd,
		&syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(i)})
}

// fleetRSS samples the broker's resident memory.
type fleetRSS struct {
	pid    int
	before int64
	conns  int
	lines  []string
}

// note records the broker's RSS now, as KB and bytes per connection.
func (r *fleetRSS) note(what string) {
	kb, err := rssKB(r.pid)
	if err != nil {
		r.lines = append(r.lines, what+": "+err.Error())
		return
	}
	r.lines = append(r.lines, fmt.Sprintf("%s: RSS %d KB (%+d KB, %.0f B per connection)",
		what, kb, kb-r.before, float64(kb-r.before)*1024/float64(r.conns)))
}

func (s mqttManyScenario) Run(ctx context.Context, raw string, _ Params) (Result, error) {
	u, pid, user, pass, err := localBroker(s.name, raw)
	if err != nil {
		return Result{}, err
	}
	addr, err := net.ResolveTCPAddr("tcp4", u.Host)
	if err != nil {
		return Result{}, err
	}
	base := "tridentbench/" + randomSuffix()
	time.Sleep(500 * time.Millisecond)
	before, err := rssKB(pid)
	if err != nil {
		return Result{}, err
	}
	rss := &fleetRSS{pid: pid, before: before, conns: s.conns}
	f, err := newFleet(s.conns)
	if err != nil {
		return Result{}, err
	}
	closed := false
	defer func() {
		if !closed {
			f.close()
		}
	}()
	fail := make(chan error, 1)
	report := func(err error) {
		select {
		case fail <- err:
		default:
		}
	}
	failed := func() error {
		select {
		case err := <-fail:
			return err
		default:
			return ctx.Err()
		}
	}

	// Connect and subscribe, 32 at a time.
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= s.conns || ctx.Err() != nil {
					return
				}
				if err := f.connect(addr, i, fmt.Sprintf("tb-many-%s-%d", base[len("tridentbench/"):], i), user, pass,
					[]string{fmt.Sprintf("%s/dev/%d", base, i), base + "/all/#"}, []byte{1, 0}); err != nil {
					report(fmt.Errorf("client %d: %w", i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed(); err != nil {
		return Result{}, err
	}
	subscribed := time.Since(start)
	rss.lines = append(rss.lines, fmt.Sprintf("%d clients connected and subscribed in %v (%.0f/s)",
		s.conns, subscribed.Round(time.Millisecond), float64(s.conns)/subscribed.Seconds()))
	time.Sleep(5 * time.Second)
	rss.note("5 s after subscribing")
	time.Sleep(30 * time.Second)
	rss.note("35 s after subscribing")

	pub, err := rawMQTTConnect(u.Host, "tb-many-pub-"+randomSuffix(), user, pass)
	if err != nil {
		return Result{}, err
	}
	var pubacks atomic.Int64
	var readers sync.WaitGroup
	var tele net.Conn
	defer func() { // the readers end when their connections close
		pub.Close()
		if tele != nil {
			tele.Close()
		}
		readers.Wait()
	}()
	readers.Go(func() { countPubacks(pub, &pubacks) })
	// Each burst's rate, and the broker's CPU (user + system, from /proc)
	// per message over it: a rate can be the generator's limit (its one
	// writing thread), the broker's CPU per message is the broker's.
	var ticks0 int64
	mark := func() {
		start = time.Now()
		ticks0, _ = cpuTicks(pid)
	}
	rate := func(what string, n int, d time.Duration) {
		t, _ := cpuTicks(pid)
		perMsg := float64(t-ticks0) * 1e6 / clockTick / float64(max(n, 1))
		rss.lines = append(rss.lines, fmt.Sprintf("%s: %d in %v (%.0f/s), broker CPU %.1f µs each", what, n,
			d.Round(time.Millisecond), float64(n)/d.Seconds(), perMsg))
	}

	// Broadcast.
	mark()
	var pkt []byte
	for i := range s.broadcasts {
		pkt = mqttPacket(pkt, mqttPublish<<4, append(mqttString(nil, base+"/all/x"), fmt.Sprintf("b%d", i)...))
	}
	if _, err := pub.Write(pkt); err != nil {
		return Result{}, err
	}
	if err := f.waitAll(ctx, func(d *fleetDev) bool { return d.broadcast.Load() >= int32(s.broadcasts) }); err != nil {
		return Result{}, fmt.Errorf("broadcast: %w", err)
	}
	broadcast := time.Since(start)
	deliveries := uint64(s.conns * s.broadcasts)
	rate(fmt.Sprintf("broadcast of %d QoS 0 messages, deliveries", s.broadcasts), int(deliveries), broadcast)

	// Unicast sweep, QoS 1.
	mark()
	pkt = pkt[:0]
	for i := range s.conns {
		body := mqttString(nil, fmt.Sprintf("%s/dev/%d", base, i))
		body = binary.BigEndian.AppendUint16(body, uint16(i%65535+1))
		pkt = mqttPacket(pkt, mqttPublish<<4|1<<1, append(body, "u"...))
		if len(pkt) > 64<<10 {
			if _, err := pub.Write(pkt); err != nil {
				return Result{}, err
			}
			pkt = pkt[:0]
		}
	}
	if _, err := pub.Write(pkt); err != nil {
		return Result{}, err
	}
	if err := f.waitAll(ctx, func(d *fleetDev) bool { return d.own.Load() >= 1 }); err != nil {
		return Result{}, fmt.Errorf("unicast: %w", err)
	}
	rate("unicast, one QoS 1 message to each client", s.conns, time.Since(start))
	for deadline := time.Now().Add(30 * time.Second); pubacks.Load() < int64(s.conns); {
		if time.Now().After(deadline) {
			return Result{}, fmt.Errorf("unicast: %d of %d PUBACKs", pubacks.Load(), s.conns)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Telemetry in: one QoS 1 message from every client to one subscriber.
	tele, err = rawMQTTConnect(u.Host, "tb-many-tele-"+randomSuffix(), user, pass)
	if err != nil {
		return Result{}, err
	}
	subPkt := mqttPacket(nil, mqttSubscribe<<4|0x02, append(mqttString(binary.BigEndian.AppendUint16(nil, 1), base+"/tele/#"), 1))
	if _, err := tele.Write(subPkt); err != nil {
		return Result{}, err
	}
	teleBR := bufio.NewReaderSize(tele, 64<<10)
	if first, _, err := readMQTTPacket(teleBR, nil); err != nil || first>>4 != mqttSuback {
		return Result{}, fmt.Errorf("telemetry subscribe: %v", err)
	}
	var teleGot atomic.Int64
	readers.Go(func() { countAndAck(tele, teleBR, &teleGot) })
	mark()
	for i, d := range f.devs {
		body := binary.BigEndian.AppendUint16(mqttString(nil, base+"/tele/"+strconv.Itoa(i)), 1)
		if err := writeAll(d.fd, mqttPacket(nil, mqttPublish<<4|1<<1, append(body, "t"...))); err != nil {
			return Result{}, fmt.Errorf("telemetry: client %d: %w", i, err)
		}
	}
	// A broker may drop QoS 1 messages to a subscriber that has too many
	// queued (Mosquitto's max_queued_messages, 1000 by default): the rate
	// is of what arrived, and the shortfall is reported.
	got, lastAt := waitProgress(ctx, &teleGot, int64(s.conns))
	el := lastAt.Sub(start)
	rate("telemetry in, one QoS 1 message from each client to one subscriber", int(got), el)
	if got < int64(s.conns) {
		rss.lines = append(rss.lines, fmt.Sprintf("  telemetry: only %d of %d messages arrived (the broker dropped the rest)", got, s.conns))
	}
	if err := f.waitAll(ctx, func(d *fleetDev) bool { return d.pubacks.Load() >= 1 }); err != nil {
		return Result{}, fmt.Errorf("telemetry PUBACKs: %w", err)
	}

	// Keep-alive sweep.
	mark()
	for i, d := range f.devs {
		if err := writeAll(d.fd, []byte{12 << 4, 0}); err != nil {
			return Result{}, fmt.Errorf("ping: client %d: %w", i, err)
		}
	}
	if err := f.waitAll(ctx, func(d *fleetDev) bool { return d.pingresps.Load() >= 1 }); err != nil {
		return Result{}, fmt.Errorf("keep-alive sweep: %w", err)
	}
	rate("keep-alive sweep, a PINGREQ from each client", s.conns, time.Since(start))
	if n := f.errs.Load(); n > 0 {
		return Result{}, fmt.Errorf("%d malformed packets from the broker", n)
	}
	rss.note("after the bursts")
	time.Sleep(30 * time.Second)
	rss.note("30 s after the bursts")
	f.close()
	closed = true
	time.Sleep(30 * time.Second)
	rss.note("30 s after every client left")

	fmt.Fprintf(os.Stderr, "\n%s: pid %d, RSS %d KB before\n", s.name, pid, before)
	for _, l := range rss.lines {
		fmt.Fprintf(os.Stderr, "  %s\n", l)
	}
	return Result{Published: uint64(s.conns), Consumed: deliveries, Elapsed: subscribed,
		PublishRate: float64(s.conns) / subscribed.Seconds(), ConsumeRate: float64(deliveries) / broadcast.Seconds()}, nil
}

// waitAll waits until ok holds for every device.
func (f *fleet) waitAll(ctx context.Context, ok func(*fleetDev) bool) error {
	const timeout = 120 * time.Second
	deadline := time.Now().Add(timeout)
	from := 0
	for {
		for from < len(f.devs) && ok(f.devs[from]) {
			from++
		}
		if from == len(f.devs) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			missing := 0
			for _, d := range f.devs[from:] {
				if !ok(d) {
					missing++
				}
			}
			return fmt.Errorf("%d of %d clients still missing messages after %v", missing, len(f.devs), timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitProgress waits until n reaches want or stops growing for 3 s, and
// returns it with the time it last grew (what a rate should use: the 3 s
// without growth are not part of it).
func waitProgress(ctx context.Context, n *atomic.Int64, want int64) (int64, time.Time) {
	last, lastAt := n.Load(), time.Now()
	for last < want && ctx.Err() == nil && time.Since(lastAt) < 3*time.Second {
		time.Sleep(2 * time.Millisecond)
		if v := n.Load(); v != last {
			last, lastAt = v, time.Now()
		}
	}
	return last, lastAt
}

func slicesHasFailure(codes []byte) bool {
	for _, c := range codes {
		if c > 2 {
			return true
		}
	}
	return false
}

// countAndAck counts the PUBLISHes arriving on a subscriber's connection
// and acknowledges the QoS 1 ones.
func countAndAck(nc net.Conn, br *bufio.Reader, n *atomic.Int64) {
	bw := bufio.NewWriterSize(nc, 16<<10)
	var buf []byte
	for {
		first, body, err := readMQTTPacket(br, buf[:0])
		if err != nil {
			return
		}
		buf = body
		if first>>4 != mqttPublish || len(body) < 2 {
			continue
		}
		n.Add(1)
		tl := int(binary.BigEndian.Uint16(body))
		if (first>>1)&3 > 0 && len(body) >= 4+tl {
			_, _ = bw.Write([]byte{mqttPuback << 4, 2, body[2+tl], body[3+tl]})
		}
		if br.Buffered() == 0 {
			if bw.Flush() != nil {
				return
			}
		}
	}
}

// countPubacks counts the PUBACKs arriving on a publisher's connection.
func countPubacks(nc net.Conn, n *atomic.Int64) {
	br := bufio.NewReaderSize(nc, 64<<10)
	var buf []byte
	for {
		first, body, err := readMQTTPacket(br, buf[:0])
		if err != nil {
			return
		}
		buf = body
		if first>>4 == mqttPuback {
			n.Add(1)
		}
	}
}

// readMQTTPacket reads one packet: its first byte and body (into buf).
func readMQTTPacket(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	first, err := r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, mul := 0, 1
	for i := 0; ; i++ {
		if i == 4 {
			return 0, nil, errors.New("mqtt: bad remaining length")
		}
		d, err := r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(d&0x7f) * mul
		mul *= 128
		if d&0x80 == 0 {
			break
		}
	}
	if n > 1<<20 {
		return 0, nil, fmt.Errorf("mqtt: %d-byte packet", n)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return first, buf, nil
}

// Hidden keeps the 1k and 18k runs out of the default set (they take
// minutes); name them in --scenarios.
func (s mqttManyScenario) Hidden() bool { return s.hidden }
