package main

// mqtt-subscribed-10k (issue 18's fan-out at scale, the capacity rule for
// connections): 10,000 clean-session MQTT 3.1.1 clients, as many IoT
// devices would be, each subscribed to a topic of its own (QoS 1) and to a
// broadcast filter shared by all (QoS 0). It measures, against a broker on
// this machine (found by its listening port):
//   - connect + two subscribes per client, with 32 clients at a time;
//   - the broker's resident memory per subscribed connection;
//   - a broadcast: 20 QoS 0 messages to the shared filter, each reaching
//     every client — deliveries a second until all 200,000 arrived;
//   - a unicast sweep: one QoS 1 message to each client's own topic
//     (publisher pipelined, every PUBACK counted) — messages a second until
//     every client has its message.
//
// Every delivery is counted by its client; the scenario fails if any is
// missing. The table's "published" column is the connect+subscribe rate,
// "consumed" the broadcast delivery rate; the rest goes to stderr.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func init() {
	scenarios = append(scenarios, mqttManyScenario{name: "mqtt-subscribed-10k", conns: 10000, broadcasts: 20})
}

type mqttManyScenario struct {
	name       string
	conns      int
	broadcasts int
}

func (s mqttManyScenario) Name() string   { return s.name }
func (s mqttManyScenario) Scheme() string { return "mqtt" }

// manyClient is one subscribed client: its reader counts what arrives.
type manyClient struct {
	nc        net.Conn
	broadcast atomic.Int64 // QoS 0 broadcasts received
	own       atomic.Int64 // messages on its own topic
}

func (s mqttManyScenario) Run(ctx context.Context, raw string, _ Params) (Result, error) {
	u, pid, user, pass, err := localBroker(s.name, raw)
	if err != nil {
		return Result{}, err
	}
	base := "tridentbench/" + randomSuffix()
	time.Sleep(500 * time.Millisecond)
	before, err := rssKB(pid)
	if err != nil {
		return Result{}, err
	}

	clients := make([]*manyClient, s.conns)
	var readers sync.WaitGroup
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.nc.Close()
			}
		}
		readers.Wait()
	}()
	fail := make(chan error, 1)
	report := func(err error) {
		select {
		case fail <- err:
		default:
		}
	}

	// Connect and subscribe, 32 at a time; clients dial from 127.0.0.2–
	// 127.0.0.201 so that two runs do not run out of ephemeral ports.
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
				c, err := manyConnect(u.Host, i, fmt.Sprintf("tb-many-%s-%d", base[len("tridentbench/"):], i), user, pass,
					[]string{fmt.Sprintf("%s/dev/%d", base, i), base + "/all/#"}, []byte{1, 0})
				if err != nil {
					report(fmt.Errorf("client %d: %w", i, err))
					return
				}
				clients[i] = c
				readers.Go(func() { c.read() })
			}
		})
	}
	wg.Wait()
	select {
	case err := <-fail:
		return Result{}, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	subscribed := time.Since(start)
	time.Sleep(2 * time.Second)
	after, err := rssKB(pid)
	if err != nil {
		return Result{}, err
	}
	perConn := float64(after-before) / float64(s.conns)

	pub, err := rawMQTTConnect(u.Host, "tb-many-pub-"+randomSuffix(), user, pass)
	if err != nil {
		return Result{}, err
	}
	defer pub.Close()
	var pubacks atomic.Int64
	readers.Go(func() { countPubacks(pub, &pubacks) })

	// Broadcast.
	start = time.Now()
	var pkt []byte
	for i := range s.broadcasts {
		pkt = mqttPacket(pkt, mqttPublish<<4, append(mqttString(nil, base+"/all/x"), fmt.Sprintf("b%d", i)...))
	}
	if _, err := pub.Write(pkt); err != nil {
		return Result{}, err
	}
	want := int64(s.broadcasts)
	if err := waitAll(ctx, clients, 120*time.Second, func(c *manyClient) bool { return c.broadcast.Load() >= want }); err != nil {
		return Result{}, fmt.Errorf("broadcast: %w", err)
	}
	broadcast := time.Since(start)
	deliveries := uint64(s.conns * s.broadcasts)

	// Unicast sweep, QoS 1.
	start = time.Now()
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
	if err := waitAll(ctx, clients, 120*time.Second, func(c *manyClient) bool { return c.own.Load() >= 1 }); err != nil {
		return Result{}, fmt.Errorf("unicast: %w", err)
	}
	unicast := time.Since(start)
	for deadline := time.Now().Add(30 * time.Second); pubacks.Load() < int64(s.conns); {
		if time.Now().After(deadline) {
			return Result{}, fmt.Errorf("unicast: %d of %d PUBACKs", pubacks.Load(), s.conns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-fail:
		return Result{}, err
	default:
	}

	fmt.Fprintf(os.Stderr, "\n%s: pid %d; %d clients connected and subscribed (2 filters each) in %v (%.0f/s); "+
		"RSS %d KB → %d KB: %.1f KB per subscribed connection; broadcast of %d QoS 0 messages to all: %d deliveries in %v (%.0f/s); "+
		"one QoS 1 message to each client's own topic: %d in %v (%.0f/s)\n",
		s.name, pid, s.conns, subscribed.Round(time.Millisecond), float64(s.conns)/subscribed.Seconds(),
		before, after, perConn, s.broadcasts, deliveries, broadcast.Round(time.Millisecond), float64(deliveries)/broadcast.Seconds(),
		s.conns, unicast.Round(time.Millisecond), float64(s.conns)/unicast.Seconds())
	return Result{Published: uint64(s.conns), Consumed: deliveries, Elapsed: subscribed,
		PublishRate: float64(s.conns) / subscribed.Seconds(), ConsumeRate: float64(deliveries) / broadcast.Seconds()}, nil
}

// waitAll waits until ok holds for every client.
func waitAll(ctx context.Context, clients []*manyClient, timeout time.Duration, ok func(*manyClient) bool) error {
	deadline := time.Now().Add(timeout)
	from := 0
	for {
		for from < len(clients) && ok(clients[from]) {
			from++
		}
		if from == len(clients) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			missing := 0
			for _, c := range clients[from:] {
				if !ok(c) {
					missing++
				}
			}
			return fmt.Errorf("%d of %d clients still missing messages after %v", missing, len(clients), timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// manyConnect opens client i (MQTT 3.1.1, clean session, keep-alive off)
// from source address 127.0.0.(2+i%200) and subscribes it to filters.
func manyConnect(addr string, i int, id, user, pass string, filters []string, qos []byte) (*manyClient, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%200))}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	pkt := mqttConnectPacket(nil, id, user, pass)
	sub := binary.BigEndian.AppendUint16(nil, 1)
	for j, f := range filters {
		sub = mqttString(sub, f)
		sub = append(sub, qos[j])
	}
	pkt = mqttPacket(pkt, mqttSubscribe<<4|0x02, sub)
	_ = nc.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := nc.Write(pkt); err != nil {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 512)
	for _, want := range []byte{mqttConnack, mqttSuback} {
		first, b, err := readMQTTPacket(br, nil)
		if err != nil {
			nc.Close()
			return nil, err
		}
		if first>>4 != want {
			nc.Close()
			return nil, fmt.Errorf("packet type %d, want %d", first>>4, want)
		}
		if want == mqttConnack && (len(b) < 2 || b[1] != 0) {
			nc.Close()
			return nil, fmt.Errorf("connect refused: %x", b)
		}
		if want == mqttSuback && (len(b) < 2+len(filters) || slicesHasFailure(b[2:])) {
			nc.Close()
			return nil, fmt.Errorf("subscribe refused: %x", b)
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return &manyClient{nc: &bufferedConn{Conn: nc, r: br}}, nil
}

func slicesHasFailure(codes []byte) bool {
	for _, c := range codes {
		if c > 2 {
			return true
		}
	}
	return false
}

// bufferedConn keeps the reader that read the handshake (it may hold the
// first deliveries already).
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

// read counts the client's deliveries and acknowledges QoS 1 ones until
// the connection closes.
func (c *manyClient) read() {
	bc := c.nc.(*bufferedConn)
	var buf []byte
	for {
		first, body, err := readMQTTPacket(bc.r, buf[:0])
		if err != nil {
			return
		}
		buf = body
		if first>>4 != mqttPublish || len(body) < 2 {
			continue
		}
		tl := int(binary.BigEndian.Uint16(body))
		if 2+tl > len(body) {
			return
		}
		topic := body[2 : 2+tl]
		qos := (first >> 1) & 3
		if qos > 0 && len(body) >= 4+tl {
			ack := []byte{mqttPuback << 4, 2, body[2+tl], body[3+tl]}
			if _, err := bc.Conn.Write(ack); err != nil {
				return
			}
		}
		if n := len(topic); n >= 2 && topic[n-2] == '/' && topic[n-1] == 'x' {
			c.broadcast.Add(1)
		} else {
			c.own.Add(1)
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
