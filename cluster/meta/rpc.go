package meta

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// rpcIdle is how long the leader keeps an idle forwarding connection.
const rpcIdle = time.Minute

// serveRPC answers forwarded entries until the listener closes.
func (g *Group) serveRPC(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		g.wg.Go(func() { g.serveConn(c) })
	}
}

func (g *Group) serveConn(c net.Conn) {
	defer c.Close()
	done := make(chan struct{})
	defer close(done)
	go func() { // unblock reads on Close
		select {
		case <-g.stop:
			c.Close()
		case <-done:
		}
	}()
	r := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(rpcIdle))
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxRequest {
			_, _ = c.Write(appendResponse(nil, rpcBadRequest, "request too large"))
			return
		}
		entry := make([]byte, n)
		if _, err := io.ReadFull(r, entry); err != nil {
			return
		}
		st, msg := g.handle(entry)
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(appendResponse(nil, st, msg)); err != nil {
			return
		}
	}
}

// handle applies a forwarded entry if this node leads.
func (g *Group) handle(entry []byte) (rpcStatus, string) {
	if _, _, err := DecodeEntry(entry); err != nil {
		return rpcBadRequest, err.Error()
	}
	if !g.IsLeader() {
		return rpcNotLeader, "not leader"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	retry, idx, err := g.applyHere(ctx, entry)
	switch {
	case err == nil:
		return rpcOK, strconv.FormatUint(idx, 10) // the follower waits to apply it
	case retry || errors.Is(err, ErrClosed):
		return rpcNotLeader, err.Error()
	}
	return rpcFailed, err.Error()
}

// forward sends entry to the leader at addr and waits for its answer.
func (g *Group) forward(ctx context.Context, addr string, entry []byte) (retry bool, idx uint64, err error) {
	timeout := 2 * time.Second
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(15 * time.Second)
	}
	timeout = max(min(timeout, time.Until(deadline)), time.Millisecond)
	c, err := g.c.Mux.Dial(addr, RPCStream, timeout)
	if err != nil {
		return true, 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write(appendRequest(nil, entry)); err != nil {
		return true, 0, err
	}
	var hdr [3]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return true, 0, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(hdr[1:]))
	if _, err := io.ReadFull(c, msg); err != nil {
		return true, 0, err
	}
	switch rpcStatus(hdr[0]) {
	case rpcOK:
		idx, _ := strconv.ParseUint(string(msg), 10, 64)
		return false, idx, nil
	case rpcNotLeader:
		return true, 0, fmt.Errorf("meta: %s: %s", addr, msg)
	case rpcBadRequest:
		return false, 0, fmt.Errorf("%w: leader says: %s", ErrBadEntry, msg)
	}
	return false, 0, fmt.Errorf("meta: leader %s: %s", addr, msg)
}
