package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cmd/internal/version"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/mqtt"
	"github.com/trident-broker/trident/web"
)

// mqttHooks holds each node's mqttHook: the metadata group (raft.go)
// takes its hook when it starts, which may be before the MQTT server
// exists. Keyed by node, as tests run several nodes in one process.
var mqttHooks sync.Map // *Node → *mqttHook

// mqttHook passes the metadata group's committed records to the node's
// MQTT server (retained messages and persistent sessions are replicated:
// protocol/mqtt/cluster.go), once there is one.
type mqttHook struct{ srv atomic.Pointer[mqtt.Server] }

func (n *Node) mqttHook() *mqttHook {
	h, _ := mqttHooks.LoadOrStore(n, &mqttHook{})
	return h.(*mqttHook)
}

// mqttApplyMeta is the node's metadata hook for the MQTT front end.
func (n *Node) mqttApplyMeta(ops []exchange.MetaOp) error {
	if srv := n.mqttHook().srv.Load(); srv != nil {
		return srv.ApplyMeta(ops)
	}
	return nil // not started: NewServer loads the records from the store
}

// mqttFrontEnd runs the MQTT server on its TCP and WebSocket listeners.
type mqttFrontEnd struct {
	node   *Node
	srv    *mqtt.Server
	ln     net.Listener // TCP, or nil
	wsLn   net.Listener // WebSocket, or nil
	ws     *http.Server
	served chan struct{}
}

// startMQTT starts the MQTT listeners enabled in the config. With
// mqtt.allow_anonymous (off by default, unlike RabbitMQ) a client without
// credentials connects as mqtt.default_user, a user of its own that the
// loopback restriction still applies to; never the bootstrap user.
func (n *Node) startMQTT() error {
	c := n.cfg.MQTT
	if c.Listen == "" && c.WSListen == "" && !tlsWanted(n.cfg, c.TLSListen) && !tlsWanted(n.cfg, c.WSSListen) {
		mqttHooks.Delete(n)
		return nil
	}
	anonUser, anonPass := c.DefaultUser, c.DefaultPass
	// In a cluster the records go through the replicator, and the
	// server names this node in its session records.
	var st mqtt.MetaStore = n.local
	nodeName := ""
	var liveNodes func() []mqtt.LiveNode
	var repl mqtt.Replicator
	if n.repl != nil {
		nodeName, liveNodes, repl = n.nodeName(), liveNodesOf(n.clusterFront()), n.repl
	}
	srv, err := mqtt.NewServer(mqtt.Config{
		NodeName:         nodeName,
		Replicator:       repl,
		Exchange:         c.Exchange,
		DefaultVHost:     n.cfg.DefaultVHost,
		AllowAnonymous:   c.AllowAnonymous && anonUser != "",
		AnonUser:         anonUser,
		AnonPass:         anonPass,
		CertLogin:        n.mqttCertLogin(),
		MaxMessageSize:   n.cfg.AMQP.MaxMessageSize,
		ConnectTimeout:   n.cfg.AMQP.HandshakeTimeout,
		ServerKeepAlive:  uint16(c.ServerKeepAlive / time.Second),
		MinKeepAlive:     uint16(c.MinKeepAlive / time.Second),
		ReceiveMaximum:   uint16(c.MaxInflight),
		MaxPacketSize:    c.MaxPacketSize,
		DenySubscribe:    c.DenySubscribe,
		MaxQueuedQoS0:    c.MaxQueuedQoS0,
		MaxSubscriptions: c.MaxSubscriptionsPerClient,
		MaxConnectSize:   c.MaxPacketSizeUnauthenticated,
		AllowedOrigins:   n.cfg.HTTP.AllowedOrigins,
		Tracer:           n.tracer,
		SysInterval:      c.SysInterval,
		Version:          version.Version(),
		DurableQueueType: c.DurableQueueType,
		LiveNodes:        liveNodes,
	}, n.broker, n.users, st, n.log.With("component", "mqtt"))
	if err != nil {
		return fmt.Errorf("node: mqtt: %w", err)
	}
	f := &mqttFrontEnd{node: n, srv: srv, served: make(chan struct{})}
	if c.Listen != "" {
		if f.ln, err = n.clientListen(c.Listen); err != nil {
			return fmt.Errorf("node: mqtt.listen: %w", err)
		}
	}
	if c.WSListen != "" {
		if f.wsLn, err = n.clientListen(c.WSListen); err != nil {
			if f.ln != nil {
				f.ln.Close()
			}
			return fmt.Errorf("node: mqtt.ws_listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/ws", srv.WebSocketHandler())
		f.ws = &http.Server{Handler: mux, ReadHeaderTimeout: n.cfg.AMQP.HandshakeTimeout}
		n.serveIn("mqtt-ws", f.wsLn, f.ws.Serve, nil)
		n.serve("http/web-mqtt", f.wsLn.Addr())
		n.log.Info("listening", "protocol", "mqtt-ws", "addr", f.wsLn.Addr().String())
	}
	if f.ln != nil {
		n.serveIn("mqtt", f.ln, srv.Serve, func(error) { close(f.served) })
		n.serve("mqtt", f.ln.Addr())
		n.log.Info("listening", "protocol", "mqtt", "addr", f.ln.Addr().String())
	} else {
		close(f.served)
	}
	if nodeName != "" {
		// From now on the hook reaches the server; the records committed
		// since NewServer loaded them are read again.
		n.mqttHook().srv.Store(srv)
		if err := srv.Resync(); err != nil {
			n.log.Error("mqtt: reload retained messages", "err", err)
		}
	}
	n.frontEnds = append(n.frontEnds, f)
	return nil
}

// liveNodesOf returns the function that lists the gossip ring's members
// the cluster front end f sees alive, this node included, and whether
// each runs the MQTT front end (gossiped): an MQTT session whose node is
// not among them expires on a live one that does
// (protocol/mqtt/orphan.go). It holds f itself: the MQTT server's sweeper
// calls it while Start still appends to the node's front ends.
func liveNodesOf(f *clusterFrontEnd) func() []mqtt.LiveNode {
	return func() []mqtt.LiveNode {
		if f == nil {
			return nil
		}
		var out []mqtt.LiveNode
		for _, m := range f.m.Members() {
			if m.Status == discovery.StatusAlive {
				out = append(out, mqtt.LiveNode{Name: m.Name, MQTT: m.Meta["mqtt"] != ""})
			}
		}
		return out
	}
}

func (f *mqttFrontEnd) Name() string { return "mqtt" }

func (f *mqttFrontEnd) Shutdown(ctx context.Context) error {
	mqttHooks.Delete(f.node)
	if f.ws != nil {
		_ = f.wsLn.Close()
	}
	err := f.srv.Shutdown(ctx)
	if f.ln != nil {
		_ = f.ln.Close()
	}
	if f.ws != nil {
		_ = f.ws.Close()
	}
	select {
	case <-f.served:
	case <-ctx.Done():
	}
	return err
}

func (f *mqttFrontEnd) ListConnections() []web.ConnectionInfo {
	var out []web.ConnectionInfo
	for _, i := range f.srv.Connections() {
		proto := "MQTT 3.1.1"
		switch i.Version {
		case 3:
			proto = "MQTT 3.1"
		case 5:
			proto = "MQTT 5.0"
		}
		if i.Transport == "websocket" {
			proto = "Web " + proto
		}
		out = append(out, web.ConnectionInfo{Name: i.Name, Protocol: proto, User: i.User, VHost: i.VHost,
			Peer: i.Peer, Local: i.Local, ConnectedAt: i.ConnectedAt, Heartbeat: i.Keepalive,
			RecvOct: uint64(i.RecvBytes), SendOct: uint64(i.SentBytes),
			Published: uint64(i.RecvPublish), Delivered: uint64(i.SentPublish),
			ClientProperties: map[string]any{"client_id": i.ClientID, "clean_start": i.CleanStart,
				"recv_publish": i.RecvPublish, "sent_publish": i.SentPublish, "recv_bytes": i.RecvBytes,
				"sent_bytes": i.SentBytes, "subscriptions": i.Subscriptions, "inflight": i.Inflight}})
	}
	return out
}

func (f *mqttFrontEnd) CloseConnection(name, reason string) bool {
	return f.srv.CloseConnection(name, reason)
}

// MQTTAddr returns the MQTT TCP listener's address, or nil when disabled.
func (n *Node) MQTTAddr() net.Addr {
	for _, f := range n.frontEnds {
		if m, ok := f.(*mqttFrontEnd); ok && m.ln != nil {
			return m.ln.Addr()
		}
	}
	return nil
}

// MQTTWSAddr returns the MQTT WebSocket listener's address (path /ws), or
// nil when disabled.
func (n *Node) MQTTWSAddr() net.Addr {
	for _, f := range n.frontEnds {
		if m, ok := f.(*mqttFrontEnd); ok && m.wsLn != nil {
			return m.wsLn.Addr()
		}
	}
	return nil
}
