package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// Connection-level behaviour: SASL, vhost access, permissions, tuning
// (heartbeat, frame_max, channel_max), limits, shutdown, capabilities, and
// malformed input from a raw TCP client.

// --- a raw AMQP 0-9-1 client, for what amqp091-go cannot send ---

const (
	bbFrameMethod = 1
	bbFrameHeader = 2
	bbFrameBody   = 3
	bbFrameEnd    = 0xCE
)

type bbRawClient struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

type bbFrame struct {
	typ     byte
	channel uint16
	payload []byte
}

// classMethod returns the class and method ids of a method frame.
func (f bbFrame) classMethod() (uint16, uint16) {
	if f.typ != bbFrameMethod || len(f.payload) < 4 {
		return 0, 0
	}
	return binary.BigEndian.Uint16(f.payload), binary.BigEndian.Uint16(f.payload[2:])
}

// bbAddr returns the host:port of an amqp:// URL.
func bbAddr(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Host
}

// bbAddrURL is bbURL for raw tests: the broker's address.
func bbAddrURL(t *testing.T) string {
	t.Helper()
	return bbAddr(t, bbURL(t))
}

func bbDialRaw(t *testing.T, addr string) *bbRawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &bbRawClient{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *bbRawClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("raw write: %v", err)
	}
}

func bbRawFrame(typ byte, channel uint16, payload []byte) []byte {
	b := []byte{typ, byte(channel >> 8), byte(channel)}
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	return append(b, bbFrameEnd)
}

// bbMethod builds a method payload from its class, method and encoded
// arguments.
func bbMethod(class, method uint16, args ...[]byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, class)
	b = binary.BigEndian.AppendUint16(b, method)
	for _, a := range args {
		b = append(b, a...)
	}
	return b
}

func bbShortStr(s string) []byte { return append([]byte{byte(len(s))}, s...) }
func bbLongStr(s string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...)
}
func bbU16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func bbU32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func bbU64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
func bbEmptyTable() []byte  { return bbU32(0) }
func bbSendMethod(c *bbRawClient, ch uint16, payload []byte) {
	c.t.Helper()
	c.write(bbRawFrame(bbFrameMethod, ch, payload))
}

// read reads one frame.
func (c *bbRawClient) read() (bbFrame, error) {
	var h [7]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return bbFrame{}, err
	}
	n := binary.BigEndian.Uint32(h[3:])
	if n > 16<<20 {
		return bbFrame{}, fmt.Errorf("frame of %d bytes", n)
	}
	p := make([]byte, n+1)
	if _, err := io.ReadFull(c.r, p); err != nil {
		return bbFrame{}, err
	}
	if p[n] != bbFrameEnd {
		return bbFrame{}, fmt.Errorf("bad frame end %#x", p[n])
	}
	return bbFrame{typ: h[0], channel: binary.BigEndian.Uint16(h[1:]), payload: p[:n]}, nil
}

// readMethod reads frames, skipping heartbeats, until a method frame, and
// checks its class and method.
func (c *bbRawClient) readMethod(class, method uint16) bbFrame {
	c.t.Helper()
	for {
		f, err := c.read()
		if err != nil {
			c.t.Fatalf("raw read, waiting for %d.%d: %v", class, method, err)
		}
		if f.typ == 8 {
			continue
		}
		if cl, m := f.classMethod(); cl != class || m != method {
			c.t.Fatalf("got frame type %d method %d.%d on channel %d, want %d.%d (%q)", f.typ, cl, m, f.channel, class, method, f.payload)
		}
		return f
	}
}

// handshake opens the connection with PLAIN guest/guest (or user/pass);
// it returns the frame that answered connection.open (open-ok or close).
func (c *bbRawClient) handshake(user, pass, vhost string, channelMax uint16, frameMax uint32) bbFrame {
	c.t.Helper()
	c.write([]byte("AMQP\x00\x00\x09\x01"))
	c.readMethod(10, 10) // start
	bbSendMethod(c, 0, bbMethod(10, 11, bbEmptyTable(), bbShortStr("PLAIN"), bbLongStr("\x00"+user+"\x00"+pass), bbShortStr("en_US")))
	c.readMethod(10, 30) // tune
	bbSendMethod(c, 0, bbMethod(10, 31, bbU16(channelMax), bbU32(frameMax), bbU16(0)))
	bbSendMethod(c, 0, bbMethod(10, 40, bbShortStr(vhost), bbShortStr(""), []byte{0}))
	for {
		f, err := c.read()
		if err != nil {
			c.t.Fatalf("raw read after connection.open: %v", err)
		}
		if f.typ != 8 {
			return f
		}
	}
}

// open is handshake for guest on "/" that must succeed. frameMax 0 means
// 131072 and channelMax 0 means 2047 (RabbitMQ refuses 0, "unlimited",
// when it has a limit).
func (c *bbRawClient) open(channelMax uint16, frameMax uint32) {
	c.t.Helper()
	if frameMax == 0 {
		frameMax = 131072
	}
	if channelMax == 0 {
		channelMax = 2047
	}
	f := c.handshake("guest", "guest", "/", channelMax, frameMax)
	if cl, m := f.classMethod(); cl != 10 || m != 41 {
		c.t.Fatalf("connection.open answered with %d.%d %q", cl, m, f.payload)
	}
}

// openChannel opens channel id and waits for open-ok.
func (c *bbRawClient) openChannel(id uint16) {
	c.t.Helper()
	bbSendMethod(c, id, bbMethod(20, 10, bbShortStr("")))
	c.readMethod(20, 11)
}

// bbCloseCode decodes a connection.close or channel.close payload.
func bbCloseCode(f bbFrame) (uint16, string) {
	p := f.payload[4:]
	code := binary.BigEndian.Uint16(p)
	n := int(p[2])
	return code, string(p[3 : 3+n])
}

// expectConnectionClose reads until connection.close, answers close-ok and
// returns the reply code and text.
func (c *bbRawClient) expectConnectionClose() (uint16, string) {
	c.t.Helper()
	for {
		f, err := c.read()
		if err != nil {
			c.t.Fatalf("connection ended without connection.close: %v", err)
		}
		if cl, m := f.classMethod(); cl == 10 && m == 50 {
			code, text := bbCloseCode(f)
			_, _ = c.nc.Write(bbRawFrame(bbFrameMethod, 0, bbMethod(10, 51)))
			return code, text
		}
	}
}

// expectEOF asserts that the server closes the socket.
func (c *bbRawClient) expectEOF() {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	for {
		_, err := c.r.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatal("server did not close the connection")
		}
		return
	}
}

// --- tests with amqp091-go ---

func TestConnSASLPlainAndAMQPLAIN(t *testing.T) {
	url := bbURL(t)
	for _, auth := range []amqp.Authentication{
		&amqp.PlainAuth{Username: "guest", Password: "guest"},
		&amqp.AMQPlainAuth{Username: "guest", Password: "guest"},
	} {
		c, err := amqp.DialConfig(url, amqp.Config{SASL: []amqp.Authentication{auth}})
		if err != nil {
			t.Fatalf("%s: %v", auth.Mechanism(), err)
		}
		ch, err := c.Channel()
		if err != nil {
			t.Fatalf("%s: channel: %v", auth.Mechanism(), err)
		}
		if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
			t.Fatalf("%s: %v", auth.Mechanism(), err)
		}
		c.Close()
	}
}

func TestConnBadPassword(t *testing.T) {
	u := bbURL(t)
	for _, auth := range []amqp.Authentication{
		&amqp.PlainAuth{Username: "guest", Password: "wrong"},
		&amqp.AMQPlainAuth{Username: "guest", Password: "wrong"},
		&amqp.PlainAuth{Username: "nobody-bb", Password: "guest"},
	} {
		c, err := amqp.DialConfig(u, amqp.Config{SASL: []amqp.Authentication{auth}})
		if err == nil {
			c.Close()
			t.Fatalf("%v: connected", auth)
		}
		if !errors.Is(err, amqp.ErrCredentials) && amqpCode(err) != amqp.AccessRefused {
			t.Fatalf("%v: %v, want 403 ACCESS_REFUSED", auth, err)
		}
	}
}

// TestConnGuestOnlyFromLoopback: guest connects over loopback (every other
// test), and is refused with 403 from any other address.
func TestConnGuestOnlyFromLoopback(t *testing.T) {
	var ip net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ip = n.IP
			break
		}
	}
	if ip == nil {
		t.Skip("no non-loopback IPv4 address")
	}
	b := startBroker(t, func(c *conf.Config) { c.AMQP.Listen = net.JoinHostPort(ip.String(), "0") })
	_, err := amqp.Dial(b.URL)
	if amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("guest from %s: %v, want 403", ip, err)
	}
	if err := b.n.Users().PutUser("remote-bb", "pw", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.n.Users().SetPermissions("remote-bb", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	c, err := amqp.Dial("amqp://remote-bb:pw@" + b.Addr + "/")
	if err != nil {
		t.Fatalf("another user from %s: %v", ip, err)
	}
	c.Close()
}

func TestConnUnknownVHost(t *testing.T) {
	u := bbURL(t)
	_, err := amqp.Dial(u + "no-such-vhost-bb")
	if amqpCode(err) != amqp.NotAllowed {
		t.Fatalf("unknown vhost: %v, want 530", err)
	}
}

func TestConnNoVHostPermission(t *testing.T) {
	b := startBroker(t)
	if err := b.n.Users().PutUser("bob", "pw", nil); err != nil {
		t.Fatal(err)
	}
	_, err := amqp.Dial("amqp://bob:pw@" + b.Addr + "/")
	if amqpCode(err) != amqp.NotAllowed {
		t.Fatalf("user without permissions on /: %v, want 530", err)
	}
	if err := b.n.Users().SetPermissions("bob", "/", "", "", ""); err != nil {
		t.Fatal(err)
	}
	c, err := amqp.Dial("amqp://bob:pw@" + b.Addr + "/")
	if err != nil {
		t.Fatalf("user with (empty) permissions on /: %v", err)
	}
	c.Close()
}

func TestConnPermissionsPerOperation(t *testing.T) {
	b := startBroker(t)
	if err := b.n.Users().PutUser("carol", "pw", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.n.Users().SetPermissions("carol", "/", "^bb-", "^bb-w", "^bb-r"); err != nil {
		t.Fatal(err)
	}
	conn := dial(t, "amqp://carol:pw@"+b.Addr+"/")
	newCh := func() (*amqp.Channel, chan *amqp.Error) {
		t.Helper()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		return ch, ch.NotifyClose(make(chan *amqp.Error, 1))
	}
	ch, _ := newCh()
	// configure
	if _, err := ch.QueueDeclare("other", false, false, false, false, nil); amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("declare queue without configure: %v, want 403", err)
	}
	ch, _ = newCh()
	for _, q := range []string{"bb-wq", "bb-rq"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatalf("declare %s: %v", q, err)
		}
	}
	for _, x := range []string{"bb-wx", "bb-rx"} {
		if err := ch.ExchangeDeclare(x, "direct", false, false, false, false, nil); err != nil {
			t.Fatalf("declare %s: %v", x, err)
		}
	}
	if err := ch.ExchangeDeclare("other", "direct", false, false, false, false, nil); amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("declare exchange without configure: %v, want 403", err)
	}
	// write
	ch, errs := newCh()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "bb-wx", "k", false, false, amqp.Publishing{Body: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "bb-rx", "k", false, false, amqp.Publishing{Body: []byte("no")}); err != nil {
		t.Fatal(err)
	}
	bbExpectChannelClose(t, errs, amqp.AccessRefused)
	ch, errs = newCh()
	_ = ch.PublishWithContext(context.Background(), "", "bb-wq", false, false, amqp.Publishing{Body: []byte("no")})
	bbExpectChannelClose(t, errs, amqp.AccessRefused) // the default exchange needs write too
	// read
	ch, _ = newCh()
	if _, err := ch.Consume("bb-wq", "", false, false, false, false, nil); amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("consume without read: %v, want 403", err)
	}
	ch, _ = newCh()
	if _, err := ch.Consume("bb-rq", "", false, false, false, false, nil); err != nil {
		t.Fatalf("consume with read: %v", err)
	}
	if _, _, err := ch.Get("bb-wq", true); amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("get without read: %v, want 403", err)
	}
	// bind: write on the queue, read on the exchange
	ch, _ = newCh()
	if err := ch.QueueBind("bb-wq", "k", "bb-rx", false, nil); err != nil {
		t.Fatalf("bind with write on queue and read on exchange: %v", err)
	}
	if err := ch.QueueBind("bb-rq", "k", "bb-rx", false, nil); amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("bind without write on the queue: %v, want 403", err)
	}
	ch, _ = newCh()
	if err := ch.QueueBind("bb-wq", "k", "bb-wx", false, nil); amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("bind without read on the exchange: %v, want 403", err)
	}
	// delete needs configure
	ch, _ = newCh()
	if _, err := ch.QueueDelete("bb-wq", false, false, false); err != nil {
		t.Fatalf("delete with configure: %v", err)
	}
}

func TestConnHeartbeat(t *testing.T) {
	t.Parallel()
	url := bbURL(t)
	c, err := amqp.DialConfig(url, amqp.Config{Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Config.Heartbeat != time.Second {
		t.Fatalf("negotiated heartbeat %v, want 1s", c.Config.Heartbeat)
	}
	closed := c.NotifyClose(make(chan *amqp.Error, 1))
	select {
	case e := <-closed:
		t.Fatalf("connection closed while idle: %v", e)
	case <-time.After(3 * time.Second):
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("after 3s idle: %v", err)
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatalf("after 3s idle: %v", err)
	}
}

// TestConnHeartbeatTimeout: a client that stops sending is disconnected
// after two missed heartbeats.
func TestConnHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := bbDialRaw(t, b.Addr)
	c.write([]byte("AMQP\x00\x00\x09\x01"))
	c.readMethod(10, 10)
	bbSendMethod(c, 0, bbMethod(10, 11, bbEmptyTable(), bbShortStr("PLAIN"), bbLongStr("\x00guest\x00guest"), bbShortStr("en_US")))
	c.readMethod(10, 30)
	bbSendMethod(c, 0, bbMethod(10, 31, bbU16(0), bbU32(131072), bbU16(1)))
	bbSendMethod(c, 0, bbMethod(10, 40, bbShortStr("/"), bbShortStr(""), []byte{0}))
	c.readMethod(10, 41)
	start := time.Now()
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	beats := 0
	for {
		f, err := c.read()
		if err != nil {
			break
		}
		if f.typ == 8 {
			beats++
		}
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("silent client disconnected after %v, want about 2s", d)
	}
	if beats == 0 {
		t.Fatal("server sent no heartbeats")
	}
}

func TestConnFrameMax(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) { c.AMQP.FrameMax = 4096 })
	c, err := amqp.Dial(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Config.FrameSize != 4096 {
		t.Fatalf("negotiated frame_max %d, want the server's 4096", c.Config.FrameSize)
	}
	// A client asking for less than the server gets that.
	c2, err := amqp.DialConfig(startBroker(t).URL, amqp.Config{FrameSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.Config.FrameSize != 8192 {
		t.Fatalf("negotiated frame_max %d, want the client's 8192", c2.Config.FrameSize)
	}
	for _, conn := range []*amqp.Connection{c, c2} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		q := bbQueue(t, ch, nil)
		body := bytes.Repeat([]byte("0123456789abcdef"), 3000) // 48000 bytes: many body frames
		body = append(body, 'z')
		if err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume(q, "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := receive(t, ds); !bytes.Equal(d.Body, body) {
			t.Fatalf("body of %d bytes came back as %d bytes", len(body), len(d.Body))
		}
	}
}

// TestConnFrameMaxRaw checks the frames themselves: the server splits a
// large body into frames no larger than the negotiated frame_max, and a
// client frame above it is a 501 FRAME_ERROR.
func TestConnFrameMaxRaw(t *testing.T) {
	addr := bbAddrURL(t)
	_, pch := channel(t, "amqp://guest:guest@"+addr+"/")
	// Not exclusive: the raw client publishes to it and gets from it.
	name := "bb-frame-max-" + fmt.Sprint(time.Now().UnixNano())
	if _, err := pch.QueueDeclare(name, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pch.QueueDelete(name, false, false, false) })

	const frameMax = 4096
	c := bbDialRaw(t, addr)
	c.open(0, frameMax)
	c.openChannel(1)
	body := bytes.Repeat([]byte{'x'}, 3*frameMax+100)
	// basic.publish, header, body in frames of frameMax.
	bbSendMethod(c, 1, bbMethod(60, 40, bbU16(0), bbShortStr(""), bbShortStr(name), []byte{0}))
	c.write(bbRawFrame(bbFrameHeader, 1, bbMethod(60, 0, bbU64(uint64(len(body))), bbU16(0))))
	for rest := body; len(rest) > 0; {
		n := min(len(rest), frameMax-8)
		c.write(bbRawFrame(bbFrameBody, 1, rest[:n]))
		rest = rest[n:]
	}
	// basic.get no-ack
	bbSendMethod(c, 1, bbMethod(60, 70, bbU16(0), bbShortStr(name), []byte{1}))
	f := c.readMethod(60, 71)
	if f.channel != 1 {
		t.Fatalf("get-ok on channel %d", f.channel)
	}
	var got []byte
	frames := 0
	for len(got) < len(body) {
		f, err := c.read()
		if err != nil {
			t.Fatal(err)
		}
		if 7+len(f.payload)+1 > frameMax {
			t.Fatalf("frame of %d bytes, above the negotiated frame_max %d", 8+len(f.payload), frameMax)
		}
		switch f.typ {
		case bbFrameHeader:
		case bbFrameBody:
			got = append(got, f.payload...)
			frames++
		}
	}
	if !bytes.Equal(got, body) || frames < 4 {
		t.Fatalf("got %d bytes in %d frames", len(got), frames)
	}
	// A frame above frame_max.
	c.write(bbRawFrame(bbFrameMethod, 1, bbMethod(60, 40, bbU16(0), bbShortStr(""), bbShortStr(strings.Repeat("k", 255)),
		[]byte{0}, make([]byte, frameMax))))
	if code, text := c.expectConnectionClose(); code != amqp.FrameError {
		t.Fatalf("frame above frame_max: connection.close %d %q, want 501", code, text)
	}
}

func TestConnChannelMax(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) { c.AMQP.ChannelMax = 3 })
	c := dial(t, b.URL)
	if c.Config.ChannelMax != 3 {
		t.Fatalf("negotiated channel_max %d, want 3", c.Config.ChannelMax)
	}
	for i := 1; i <= 3; i++ {
		if _, err := c.Channel(); err != nil {
			t.Fatalf("channel %d: %v", i, err)
		}
	}
	if _, err := c.Channel(); err == nil {
		t.Fatal("a 4th channel opened with channel_max 3")
	}
}

// TestConnChannelMaxRaw: a client that opens a channel above the
// negotiated channel_max gets connection.close 530 NOT_ALLOWED, as from
// RabbitMQ.
func TestConnChannelMaxRaw(t *testing.T) {
	c := bbDialRaw(t, bbAddrURL(t))
	c.open(2, 0)
	c.openChannel(1)
	c.openChannel(2)
	bbSendMethod(c, 3, bbMethod(20, 10, bbShortStr("")))
	if code, text := c.expectConnectionClose(); code != amqp.NotAllowed {
		t.Fatalf("channel 3 with channel_max 2: connection.close %d %q, want 530", code, text)
	}
}

func TestConnMaxMessageSize(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) { c.AMQP.MaxMessageSize = 1000 })
	conn, ch := channel(t, b.URL)
	q := bbQueue(t, ch, nil)
	if err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: make([]byte, 1000)}); err != nil {
		t.Fatal(err)
	}
	bbWaitReady(t, conn, q, 1)
	errs := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: make([]byte, 1001)}); err != nil {
		t.Fatal(err)
	}
	bbExpectChannelClose(t, errs, amqp.PreconditionFailed)
	if conn.IsClosed() {
		t.Fatal("connection closed; want only the channel closed")
	}
	if n := bbReady(t, conn, q); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
}

func TestConnPublishMissingExchange(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	errs := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.PublishWithContext(context.Background(), "bb-no-such-exchange", "k", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	bbExpectChannelClose(t, errs, amqp.NotFound)
	if _, err := conn.Channel(); err != nil {
		t.Fatalf("connection unusable after a channel error: %v", err)
	}
}

func TestConnGracefulShutdown(t *testing.T) {
	b := startBroker(t)
	c := dial(t, b.URL)
	closed := c.NotifyClose(make(chan *amqp.Error, 1))
	b.stop()
	e := bbClosed(t, closed)
	if e.Code != amqp.ConnectionForced || !e.Server {
		t.Fatalf("on shutdown: %v (server=%v), want 320 CONNECTION_FORCED", e, e.Server)
	}
}

func TestConnServerCapabilities(t *testing.T) {
	url := bbURL(t)
	c := dial(t, url)
	caps, ok := c.Properties["capabilities"].(amqp.Table)
	if !ok {
		t.Fatalf("no capabilities table in %v", c.Properties)
	}
	for _, k := range []string{"publisher_confirms", "exchange_exchange_bindings", "basic.nack", "consumer_cancel_notify",
		"connection.blocked", "authentication_failure_close", "per_consumer_qos", "direct_reply_to"} {
		if v, _ := caps[k].(bool); !v {
			t.Errorf("capability %s = %v, want true", k, caps[k])
		}
	}
	for _, k := range []string{"product", "version", "platform"} {
		if _, ok := c.Properties[k].(string); !ok {
			t.Errorf("server property %s missing", k)
		}
	}
}

// --- malformed input ---

func TestMalformedProtocolHeader(t *testing.T) {
	addr := bbAddrURL(t)
	for _, hdr := range []string{"AMQP\x00\x00\x08\x00", "AMQP\x00\x00\x09\x02", "GET / HTTP/1.1\r\n\r\n"} {
		c := bbDialRaw(t, addr)
		c.write([]byte(hdr))
		got := make([]byte, 8)
		if _, err := io.ReadFull(c.r, got); err != nil {
			t.Fatalf("header %q: %v", hdr, err)
		}
		if string(got) != "AMQP\x00\x00\x09\x01" {
			t.Fatalf("header %q answered with %q", hdr, got)
		}
		c.expectEOF()
	}
}

func TestMalformedFrameEnd(t *testing.T) {
	c := bbDialRaw(t, bbAddrURL(t))
	c.open(0, 0)
	f := bbRawFrame(bbFrameMethod, 1, bbMethod(20, 10, bbShortStr("")))
	f[len(f)-1] = 0x00
	c.write(f)
	if code, text := c.expectConnectionClose(); code != amqp.FrameError {
		t.Fatalf("bad frame end: connection.close %d %q, want 501", code, text)
	}
}

func TestMalformedUnknownMethod(t *testing.T) {
	addr := bbAddrURL(t)
	for _, tc := range []struct {
		name          string
		class, method uint16
	}{
		{"unknown method of basic", 60, 999},
		{"unknown class", 999, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if os.Getenv("TRIDENT_TEST_REFERENCE_URL") != "" {
				t.Skip("RabbitMQ 3.x drops the socket without connection.close (its reader crashes on unknown_method_id)")
			}
			c := bbDialRaw(t, addr)
			c.open(0, 0)
			c.openChannel(1)
			bbSendMethod(c, 1, bbMethod(tc.class, tc.method))
			code, text := c.expectConnectionClose()
			if code != amqp.CommandInvalid && code != amqp.NotImplemented {
				t.Fatalf("connection.close %d %q, want 503 or 540", code, text)
			}
		})
	}
}

func TestMalformedGarbageIsolated(t *testing.T) {
	url := bbURL(t)
	addr := bbAddr(t, url)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	ds, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	garbage := []byte("\x01\x00\x01\xff\xff\xff\xf0garbage\xde\xad\xbe\xef")
	// Garbage instead of a handshake, and garbage after one.
	c := bbDialRaw(t, addr)
	c.write(garbage)
	c.expectEOF()
	c = bbDialRaw(t, addr)
	c.open(0, 0)
	c.write(garbage)
	if code, _ := c.expectConnectionClose(); code < 500 {
		t.Fatalf("garbage after the handshake: connection.close %d, want a 5xx connection error", code)
	}
	c.expectEOF()
	// The other connection did not notice.
	bbPublish(t, ch, q, "still here")
	if d := receive(t, ds); string(d.Body) != "still here" {
		t.Fatalf("got %q", d.Body)
	}
	if conn.IsClosed() {
		t.Fatal("bystander connection closed")
	}
}

// TestMalformedContentOutOfOrder: a body frame without a publish is an
// UNEXPECTED_FRAME (505) connection error.
func TestMalformedContentOutOfOrder(t *testing.T) {
	c := bbDialRaw(t, bbAddrURL(t))
	c.open(0, 0)
	c.openChannel(1)
	c.write(bbRawFrame(bbFrameBody, 1, []byte("stray")))
	if code, text := c.expectConnectionClose(); code != amqp.UnexpectedFrame {
		t.Fatalf("stray body frame: connection.close %d %q, want 505", code, text)
	}
}

// TestChannelCloseCrossing: the server closes a channel (404 on a passive
// declare) while the client closes it too, or reopens the number without
// answering close-ok. Neither side may be left waiting.
func TestChannelCloseCrossing(t *testing.T) {
	passiveMissing := bbMethod(50, 10, bbU16(0), bbShortStr("no-such-queue-x"), []byte{1}, bbEmptyTable()) // passive
	t.Run("close crosses close", func(t *testing.T) {
		c := bbDialRaw(t, bbAddrURL(t))
		c.open(0, 0)
		c.openChannel(1)
		bbSendMethod(c, 1, passiveMissing)
		// The client closes before it has read the server's channel.close.
		bbSendMethod(c, 1, bbMethod(20, 40, bbU16(200), bbShortStr("bye"), bbU16(0), bbU16(0)))
		c.readMethod(20, 40) // the server's channel.close (404)
		c.readMethod(20, 41) // close-ok for ours
		c.openChannel(1)     // the number is free again
	})
	t.Run("reopen without close-ok", func(t *testing.T) {
		c := bbDialRaw(t, bbAddrURL(t))
		c.open(0, 0)
		c.openChannel(1)
		bbSendMethod(c, 1, passiveMissing)
		c.readMethod(20, 40)
		c.openChannel(1)
	})
}

// TestConnUpdateSecret (issue 14): connection.update-secret logs the user
// in again with the new secret: the right one gets update-secret-ok and
// the connection goes on; a wrong one closes the connection with 530
// NOT_ALLOWED, as RabbitMQ refuses a secret its backend rejects.
func TestConnUpdateSecret(t *testing.T) {
	url := bbURL(t)
	c := dial(t, url)
	if err := c.UpdateSecret("guest", "rotation"); err != nil {
		t.Fatalf("update with the right secret: %v", err)
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("after update: %v", err)
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatalf("after update: %v", err)
	}
	closed := c.NotifyClose(make(chan *amqp.Error, 1))
	err = c.UpdateSecret("not-the-password", "rotation")
	if err == nil {
		t.Fatal("a wrong secret was accepted")
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.NotAllowed {
			t.Fatalf("closed with %v, want 530 NOT_ALLOWED", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed after a refused secret")
	}
}
