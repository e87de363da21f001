package node

import (
	"context"
	"maps"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/drain"
)

// Maintenance mode (cluster/drain): the client listeners (AMQP, MQTT,
// STOMP, stream, their TLS and WebSocket variants) are opened through n.gate so
// that a drain suspends them; the HTTP API, Prometheus and the cluster
// ports are not. The drained state is the file maintenanceFile in the
// data directory, and is gossiped under maintenanceMetaKey so that every
// node's /api/nodes reports it.

const (
	maintenanceFile    = "maintenance"
	maintenanceMetaKey = drain.MetaKey
)

// shutdownHandOver bounds the leadership hand-over on Close.
const shutdownHandOver = 5 * time.Second

func (n *Node) startDrainer() {
	n.gate = drain.NewGate()
	n.drainer = drain.New(drain.Config{
		Gate:      n.gate,
		Clients:   clientCloser{n},
		Leaders:   leaders{n},
		StateFile: filepath.Join(n.cfg.DataDir, maintenanceFile),
		OnChange:  n.gossipDrained,
		Log:       n.log.With("component", "maintenance"),
	})
	n.drainer.Restore()
}

// clientListen opens a client protocol listener (one a drain suspends).
func (n *Node) clientListen(addr string) (net.Listener, error) {
	ln, err := n.gate.Listen(addr)
	if err != nil {
		return nil, err // not a typed nil: callers compare with nil
	}
	return ln, nil
}

// Maintenance is the node's maintenance mode, for the management API.
func (n *Node) Maintenance() *drain.Drainer { return n.drainer }

// handOver, on Close, closes the client connections and gives the
// node's Raft leaderships to other voters before anything else stops,
// bounded by shutdownHandOver and ctx (drain.Drainer.Quiesce).
func (n *Node) handOver(ctx context.Context) {
	if n.drainer == nil || n.Groups() == nil || ctx.Err() != nil {
		return
	}
	hctx, cancel := context.WithTimeout(ctx, shutdownHandOver)
	defer cancel()
	if err := n.drainer.Quiesce(hctx); err != nil {
		n.log.Warn("shutdown: some leaderships were not handed over", "err", err)
	}
}

// gossipDrained tells the other nodes that this one is (no longer) drained.
func (n *Node) gossipDrained(drained bool) {
	f := n.clusterFront()
	if f == nil || f.m == nil {
		return
	}
	v := ""
	if drained {
		v = "drained"
	}
	// SetMeta waits (at most a second) for the broadcast; it runs under
	// the drainer's own lock (which orders a drain's and a revive's
	// announcements) and the metadata's, and under no core lock.
	if err := n.gossipMetaKey(f, maintenanceMetaKey, v); err != nil {
		n.log.Warn("maintenance: could not gossip the state", "err", err)
	}
}

// gossipMetaKey sets (or, with v empty, removes) key of this node's
// gossiped metadata, keeping the rest: a read, change and write under
// Node.metaMu, so that two keys set at once both stay.
func (n *Node) gossipMetaKey(f *clusterFrontEnd, key, v string) error {
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	m := maps.Clone(f.m.LocalMember().Meta)
	if m == nil {
		m = map[string]string{}
	}
	if v != "" {
		m[key] = v
	} else {
		delete(m, key)
	}
	return f.m.SetMeta(m, time.Second)
}

// leaders is drain.Leaders over the groups host, once clustering runs.
type leaders struct{ n *Node }

func (l leaders) Names() []string {
	if h := l.n.Groups(); h != nil {
		return h.Names()
	}
	return nil
}

func (l leaders) Raft(name string) (*raft.Raft, bool) {
	if h := l.n.Groups(); h != nil {
		return h.Raft(name)
	}
	return nil, false
}

// clientCloser is drain.Clients over the protocol front ends.
type clientCloser struct{ n *Node }

func (c clientCloser) CloseClients(reason string) int {
	closed := 0
	if a := c.n.amqp; a != nil {
		for _, ci := range a.Connections() {
			if a.CloseConnection(ci.Name, reason) { // 320 CONNECTION_FORCED
				closed++
			}
		}
	}
	for _, f := range c.n.frontEnds {
		if m, ok := f.(*mqttFrontEnd); ok {
			closed += m.srv.DisconnectAll() // MQTT 5: 0x8B server shutting down
			continue
		}
		for _, ci := range f.ListConnections() { // STOMP: an ERROR frame
			if f.CloseConnection(ci.Name, reason) {
				closed++
			}
		}
	}
	return closed
}

// tlsRaw opens the TCP listener under a TLS listener: through the gate
// for a client protocol's, not for the HTTP API's or Prometheus'.
func (n *Node) tlsRaw(key, addr string) (net.Listener, error) {
	if strings.HasPrefix(key, "http.") || strings.HasPrefix(key, "prometheus.") {
		return net.Listen("tcp", addr)
	}
	return n.clientListen(addr)
}

func (c clientCloser) OpenClients() int { return len(connections(c).ListConnections()) }
