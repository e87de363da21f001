package test

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// Issue 38, AMQP limits: channel numbers (F15) and message bodies (F16).

// TestSecurityF15ChannelMax: the spec's usable channel numbers are
// 1..channel-max. A channel.open on a number above the negotiated
// channel_max closes the connection with 530 NOT_ALLOWED (RabbitMQ's code
// for channel_max); the highest allowed number opens.
func TestSecurityF15ChannelMax(t *testing.T) {
	addr := startBroker(t).Addr
	for _, id := range []uint16{2048, 5000, 65535} {
		c := bbDialRaw(t, addr)
		c.open(2047, 0)
		c.openChannel(1)
		c.openChannel(2047)
		bbSendMethod(c, id, bbMethod(20, 10, bbShortStr("")))
		if code, text := c.expectConnectionClose(); code != amqp.NotAllowed {
			t.Fatalf("channel.open on %d with channel_max 2047: connection.close %d %q, want 530", id, code, text)
		}
		c.expectEOF()
	}
	// A client that asks for fewer channels gets that many numbers.
	c := bbDialRaw(t, addr)
	c.open(10, 0)
	c.openChannel(10)
	bbSendMethod(c, 11, bbMethod(20, 10, bbShortStr("")))
	if code, text := c.expectConnectionClose(); code != amqp.NotAllowed {
		t.Fatalf("channel.open on 11 with channel_max 10: connection.close %d %q, want 530", code, text)
	}
}

// heapObjects is the heap the process holds in objects after a full GC:
// what is live.
func heapObjects() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestSecurityF16BodyGrows: four logged-in publishers each send a content
// header that declares a 100 MB body (under the max message size), then
// trickle a few KiB of it. The broker's buffers grow with what arrived:
// the heap grows by far less than one declared body, let alone four. A
// body over the max message size still gets 406 PRECONDITION_FAILED.
func TestSecurityF16BodyGrows(t *testing.T) {
	const declared = 100 << 20
	b := startBroker(t, func(c *conf.Config) { c.MemoryHighWatermarkPercent = 0 })
	before := heapObjects()
	var clients []*bbRawClient
	for range 4 {
		c := bbDialRaw(t, b.Addr)
		c.open(0, 0)
		c.openChannel(1)
		// basic.publish to the default exchange, routing key "f16"
		bbSendMethod(c, 1, bbMethod(60, 40, bbU16(0), bbShortStr(""), bbShortStr("f16"), []byte{0}))
		// content header: class 60, weight 0, body size, no properties
		c.write(bbRawFrame(bbFrameHeader, 1, append(append(bbU16(60), bbU16(0)...), append(bbU64(declared), bbU16(0)...)...)))
		clients = append(clients, c)
	}
	chunk := make([]byte, 4096)
	for range 8 {
		for _, c := range clients {
			c.write(bbRawFrame(bbFrameBody, 1, chunk))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the broker reads what was sent
	after := heapObjects()
	grown := int64(after) - int64(before)
	t.Logf("heap before %d MB, after %d MB, grown %d KB", before>>20, after>>20, grown>>10)
	if grown > 32<<20 {
		t.Fatalf("heap grew by %d MB with 4 bodies of 32 KiB received (%d MB declared each)", grown>>20, declared>>20)
	}
	for _, c := range clients {
		c.nc.Close()
	}

	// The declared size is still bounded by the max message size.
	c := bbDialRaw(t, b.Addr)
	c.open(0, 0)
	c.openChannel(1)
	bbSendMethod(c, 1, bbMethod(60, 40, bbU16(0), bbShortStr(""), bbShortStr("f16"), []byte{0}))
	c.write(bbRawFrame(bbFrameHeader, 1, append(append(bbU16(60), bbU16(0)...), append(bbU64(uint64(b.cfg.AMQP.MaxMessageSize)+1), bbU16(0)...)...)))
	f := c.readMethod(20, 40) // channel.close
	if code, text := bbCloseCode(f); code != amqp.PreconditionFailed {
		t.Fatalf("body of max_message_size+1: channel.close %d %q, want 406", code, text)
	}
}

// TestSecurityF16BodyWaitsForAlarm: a body being assembled that needs more
// memory while the memory alarm is raised waits for the alarm to clear,
// as a publish does, then completes.
func TestSecurityF16BodyWaitsForAlarm(t *testing.T) {
	const size = 1 << 20
	b := startBroker(t, func(c *conf.Config) { c.MemoryHighWatermarkPercent = 0 })
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("f16w", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	depth := func() int {
		q, err := ch.QueueDeclarePassive("f16w", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	c := bbDialRaw(t, b.Addr)
	c.open(0, 0)
	c.openChannel(1)
	bbSendMethod(c, 1, bbMethod(60, 40, bbU16(0), bbShortStr(""), bbShortStr("f16w"), []byte{0}))
	c.write(bbRawFrame(bbFrameHeader, 1, append(append(bbU16(60), bbU16(0)...), append(bbU64(size), bbU16(0)...)...)))
	chunk := make([]byte, 64<<10)
	c.write(bbRawFrame(bbFrameBody, 1, chunk))
	time.Sleep(100 * time.Millisecond) // the first frame is in
	alarms := b.n.Broker().Alarms()
	alarms.Set("memory", true)
	done := make(chan struct{})
	go func() { // the broker stops reading: writes may block
		defer close(done)
		for range size/len(chunk) - 1 {
			if _, err := c.nc.Write(bbRawFrame(bbFrameBody, 1, chunk)); err != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if n := depth(); n != 0 {
		t.Fatalf("%d messages while the alarm is raised, want the body held back", n)
	}
	alarms.Set("memory", false)
	<-done
	waitFor(t, func() bool { return depth() == 1 })
}
