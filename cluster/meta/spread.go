package meta

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"
)

// A committed change is applied by the other members a moment after the
// commit. RabbitMQ's clients expect a declaration to be visible on every
// node once declare-ok arrives (a publisher on another node must not find
// the new queue missing and have its message confirmed as unroutable), so
// Propose also waits, briefly, until every other member that answers has
// applied the entry: each member serves WaitStream, where a request is
// the 8-byte index and the answer one byte once that index is applied
// there (or spreadTimeout has passed). Members that are down, cut off or
// slow delay a write by at most spreadDial + spreadTimeout; they catch up
// from the log as usual.

// WaitStream is the mux stream of the "applied yet?" requests.
const WaitStream = "meta-wait"

const (
	spreadDial    = 500 * time.Millisecond
	spreadTimeout = 2 * time.Second
)

// serveWait answers WaitStream requests until ln is closed.
func (g *Group) serveWait(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		g.wg.Go(func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(spreadDial + spreadTimeout))
			var b [8]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return
			}
			idx := binary.BigEndian.Uint64(b[:])
			deadline := time.Now().Add(spreadTimeout)
			for g.fsm.Applied() < idx && time.Now().Before(deadline) && !g.closed() {
				time.Sleep(time.Millisecond)
			}
			ok := byte(0)
			if g.fsm.Applied() < idx {
				ok = 1
			}
			_, _ = c.Write([]byte{ok})
		})
	}
}

// waitPeers waits until the other members of the configuration have
// applied idx, or could not say so in time.
func (g *Group) waitPeers(idx uint64) {
	f := g.r.GetConfiguration()
	if f.Error() != nil || idx == 0 {
		return
	}
	self := g.c.Host.Self().ID
	var wg sync.WaitGroup
	for _, s := range f.Configuration().Servers {
		if s.ID == self {
			continue
		}
		addr := string(s.Address)
		wg.Go(func() {
			c, err := g.c.Mux.Dial(addr, WaitStream, spreadDial)
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(spreadTimeout + spreadDial))
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], idx)
			if _, err := c.Write(b[:]); err != nil {
				return
			}
			var ok [1]byte
			_, _ = io.ReadFull(c, ok[:])
		})
	}
	wg.Wait()
}
