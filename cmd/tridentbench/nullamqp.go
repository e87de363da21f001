package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/trident-broker/trident/protocol/amqp/wire"
)

// nullAMQP (--null-amqp) is a relay, not a broker: the least a server can
// do for the raw AMQP scenarios. It answers the handshake and the
// synchronous methods the scenarios send, and turns each basic.publish
// into a basic.deliver to the consumer of the queue named by its routing
// key — no exchanges, no queue (a message published while its queue has
// no consumer is dropped), no prefetch, acks ignored, every publish of a
// confirming channel confirmed by one multiple basic.ack per read batch.
// Deliveries are appended to the consumer's buffer and written by the
// publisher's own reader when its read batch ends (one write per batch,
// no writer goroutine): the cheapest path from one socket to another.
//
// Run against it, a raw scenario measures what the load generator, the
// kernel's loopback and this machine's two cores allow on their own: the
// ceiling any broker's figures here sit under. It is a measuring stick
// for the README, never a target users run.
type nullAMQP struct {
	mu        sync.Mutex
	consumers map[string]*nullConn // queue name → its consumer's connection
}

type nullConn struct {
	s  *nullAMQP
	nc net.Conn
	r  *bufio.Reader

	// Output, written by whoever holds mu (the publishers' readers, or
	// this connection's own replies).
	mu      sync.Mutex
	out     []byte
	tag     uint64 // last delivery tag
	ctag    string // consumer tag
	dirty   bool   // out has bytes a flush will write
	confirm bool   // confirm.select seen (reader only)
	pubs    uint64 // publishes seen (reader only)
}

func serveNullAMQP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("null AMQP relay on %s\n", ln.Addr())
	return (&nullAMQP{consumers: map[string]*nullConn{}}).serve(ln)
}

// serve accepts connections until ln fails.
func (s *nullAMQP) serve(ln net.Listener) error {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return err
		}
		c := &nullConn{s: s, nc: nc, r: bufio.NewReaderSize(nc, 64<<10)}
		go c.serve()
	}
}

func (c *nullConn) serve() {
	defer c.nc.Close()
	defer c.s.drop(c)
	var h [8]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil || wire.CheckProtocolHeader(h[:]) != nil {
		return
	}
	c.reply(0, &wire.ConnectionStart{VersionMajor: 0, VersionMinor: 9, ServerProperties: wire.Table{"product": "null"},
		Mechanisms: "PLAIN", Locales: "en_US"})
	var pub wire.BasicPublish
	var dsts []*nullConn // consumers written to in this read batch
	var buf []byte
	var cur *nullConn // the current publish's consumer, or nil: drop
	for {
		if len(dsts) > 0 && !wire.FrameBuffered(c.r) {
			for _, d := range dsts {
				d.flush()
			}
			dsts = dsts[:0]
			if c.confirm {
				c.reply(1, &wire.BasicAck{DeliveryTag: c.pubs, Multiple: true})
			}
		}
		f, err := wire.ReadFrame(c.r, 0, buf)
		if err != nil {
			return
		}
		buf = f.Payload[:0]
		switch f.Type {
		case wire.FrameHeader, wire.FrameBody:
			if cur != nil {
				cur.mu.Lock()
				cur.out = wire.AppendFrame(cur.out, f.Type, 1, f.Payload)
				cur.mu.Unlock()
			}
			continue
		case wire.FrameMethod:
		default:
			continue
		}
		cid, mid, args, err := wire.SplitMethod(f.Payload)
		if err != nil {
			return
		}
		if cid == wire.ClassBasic && mid == wire.MethodBasicPublish {
			if pub.DecodeArgs(args) != nil {
				return
			}
			c.pubs++
			c.s.mu.Lock()
			cur = c.s.consumers[pub.RoutingKey]
			c.s.mu.Unlock()
			if cur == nil {
				continue
			}
			cur.mu.Lock()
			cur.tag++
			cur.out, _ = wire.AppendMethodFrame(cur.out, 1, &wire.BasicDeliver{ConsumerTag: cur.ctag, DeliveryTag: cur.tag, RoutingKey: pub.RoutingKey})
			if !cur.dirty {
				cur.dirty = true
				dsts = append(dsts, cur)
			}
			cur.mu.Unlock()
			continue
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			return
		}
		if !c.method(f.Channel, m) {
			return
		}
	}
}

// method answers a method other than basic.publish; false ends the
// connection.
func (c *nullConn) method(ch uint16, m wire.Method) bool {
	switch m := m.(type) {
	case *wire.ConnectionStartOK:
		c.reply(0, &wire.ConnectionTune{ChannelMax: 2047, FrameMax: 131072})
	case *wire.ConnectionOpen:
		c.reply(0, &wire.ConnectionOpenOK{})
	case *wire.ConnectionClose:
		c.reply(0, &wire.ConnectionCloseOK{})
		return false
	case *wire.ChannelOpen:
		c.reply(ch, &wire.ChannelOpenOK{})
	case *wire.ChannelClose:
		c.reply(ch, &wire.ChannelCloseOK{})
	case *wire.QueueDeclare:
		c.reply(ch, &wire.QueueDeclareOK{Queue: m.Queue})
	case *wire.QueueDelete:
		c.reply(ch, &wire.QueueDeleteOK{})
	case *wire.BasicQos:
		c.reply(ch, &wire.BasicQosOK{})
	case *wire.ConfirmSelect:
		c.confirm = true
		c.reply(ch, &wire.ConfirmSelectOK{})
	case *wire.BasicConsume:
		c.mu.Lock()
		c.ctag = m.ConsumerTag
		c.mu.Unlock()
		c.s.mu.Lock()
		c.s.consumers[m.Queue] = c
		c.s.mu.Unlock()
		c.reply(ch, &wire.BasicConsumeOK{ConsumerTag: m.ConsumerTag})
	}
	return true
}

// reply writes one method frame at once.
func (c *nullConn) reply(ch uint16, m wire.Method) {
	c.mu.Lock()
	c.out, _ = wire.AppendMethodFrame(c.out, ch, m)
	c.dirty = true
	c.mu.Unlock()
	c.flush()
}

// flush writes what out holds, from the caller's goroutine.
func (c *nullConn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.out) > 0 {
		_, _ = c.nc.Write(c.out)
	}
	c.out, c.dirty = c.out[:0], false
}

// drop forgets c as a consumer.
func (s *nullAMQP) drop(c *nullConn) {
	s.mu.Lock()
	for q, x := range s.consumers {
		if x == c {
			delete(s.consumers, q)
		}
	}
	s.mu.Unlock()
}
