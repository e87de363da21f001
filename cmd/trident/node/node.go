// Package node assembles one Trident server from a conf.Config: the store,
// the core, the users and the protocol listeners, and tears them down in
// order. cmd/trident runs one; black-box tests start one on 127.0.0.1:0.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/drain"
	"github.com/trident-broker/trident/cluster/meta"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/alarm"
	"github.com/trident-broker/trident/protocol/amqp"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
	"github.com/trident-broker/trident/protocol/stream"
	"github.com/trident-broker/trident/shovel"
	"github.com/trident-broker/trident/store"
	"github.com/trident-broker/trident/web"
)

// storeDir is the store's directory under conf.Config.DataDir.
const storeDir = "badger"

// localStore is the store the core, the users, the shovels and MQTT are
// given (Node.local): the node's own. A test replaces it with one that
// refuses, in a cluster, a write of a replicated record that does not
// come through the metadata group (replication_test.go).
var localStore = func(b *store.Badger) exchange.Store { return b }

// Node is a running server. Its methods are safe for concurrent use.
type Node struct {
	cfg conf.Config
	log *slog.Logger
	// metaMu orders the changes of this node's gossiped metadata
	// (gossipMetaKey).
	metaMu sync.Mutex
	store  *store.Badger
	broker *exchange.Broker
	users  *auth.Users
	oauth  *auth.OAuth2 // nil: OAuth 2 off
	// storeKey is encryption.key_file's key (nil: off); the Raft DB is
	// encrypted with it too (raft.go).
	storeKey []byte

	// local is the store the core, the users, the shovels and MQTT keep
	// their records in: store (localStore). In a cluster, the records
	// every node holds reach it only through the metadata group's applier
	// (raft.go) and are written through repl or as commands.
	local exchange.Store
	// repl writes, on the callers' explicit request, the records every
	// node of the cluster holds that are not commands; nil standalone.
	repl *meta.Replicator

	amqp    *amqp.Server
	amqpLn  net.Listener
	shovels *shovel.Manager
	// shovelSockets: the shovels' own TCP connections, never "from
	// loopback" on this node's AMQP listeners (shovels.go).
	shovelSockets *shovel.Sockets
	// clusterMembers lists the cluster's members once the cluster runs
	// (shovels.go).
	clusterMembers atomic.Pointer[func() []discovery.Member]
	amqpServed     chan error // receives Serve's result once

	http   *http.Server
	httpLn net.Listener
	api    *web.Server

	metrics   *http.Server
	metricsLn net.Listener

	// frontEnds are the other protocol front ends (MQTT, STOMP, ...), in
	// start order; Close shuts them down in reverse before the core.
	frontEnds []frontEnd

	tls tlsState // the TLS listeners (tls.go)

	// gate holds the client listeners a drain suspends; drainer is the
	// maintenance mode (drain.go).
	gate    *drain.Gate
	drainer *drain.Drainer

	served servedListeners // what the API lists (listeners.go)

	stopWatch chan struct{} // stops the memory and disk alarms' watchers

	tracer *tracing.Tracer // nil: tracing off (tracing.go)

	audit       *slog.Logger // audit records; nil when audit.file is empty
	auditCloser io.Closer    // the audit file, if any (security.go)

	closeOnce sync.Once
	closeErr  error
}

// Start opens the store under cfg.DataDir, recovers the core, loads the
// users (creating the default user on a fresh store), ensures the default
// vhost and starts the enabled listeners. On error everything opened so far
// is closed again. cfg should have passed Validate.
func Start(cfg conf.Config, log *slog.Logger) (_ *Node, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, log: log, shovelSockets: shovel.NewSockets()}
	defer func() {
		if err != nil {
			n.abort()
		}
	}()

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	n.startDrainer() // before any client listener: a drained node stays so
	dir := filepath.Join(cfg.DataDir, storeDir)
	if err := n.openAudit(); err != nil {
		return nil, err
	}
	sopts, err := storeOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	if above, every, ok := alarm.StoreTrim(n.memoryLimit(), store.DefaultBadgerOptions().TrimAbove); ok {
		sopts.TrimAbove, sopts.TrimInterval = above, every
	}
	n.storeKey = sopts.EncryptionKey
	opened := time.Now()
	n.store, err = store.OpenBadger(dir, sopts, log.With("component", "store"))
	if err != nil {
		return nil, storeOpenError(dir, err)
	}
	log.Info("store open", "dir", dir, "took", time.Since(opened).Round(time.Millisecond))
	n.local = localStore(n.store)
	opts := []exchange.Option{exchange.WithEventVHost(cfg.EventExchange.VHost), exchange.WithAMQP10Codec(stream.DecodeAMQP10)}
	if cfg.Cluster.Enabled() {
		n.repl = meta.NewReplicator(n.store)
		opts = append(opts, exchange.WithReplicator(n.repl))
	}
	n.broker, err = exchange.New(n.local, log.With("component", "core"), opts...)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.store.OnRounds(n.broker.StoreRound)
	n.broker.Limiter().Set(exchange.Limits(cfg.Limits))
	n.broker.SetQueueWindow(cfg.Queues.WindowMessages, int64(cfg.Queues.WindowBytes))
	n.broker.SetQueueMemoryBudget(int64(cfg.Queues.MemoryBudget))
	if n.oauth, err = n.oauth2(); err != nil {
		return nil, err
	}
	aopts := n.authOptions()
	if n.repl != nil {
		aopts.Replicator = n.repl
	}
	n.users, err = auth.New(n.local, aopts)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.users.SetEvents(n.broker.Events())
	if err := n.broker.EnsureVHost(cfg.DefaultVHost); err != nil {
		return nil, fmt.Errorf("node: default vhost %q: %w", cfg.DefaultVHost, err)
	}
	if cfg.Definitions != "" {
		if err := n.importDefinitions(cfg.Definitions); err != nil {
			return nil, err
		}
	}

	if err := n.startTracing(); err != nil {
		return nil, err
	}
	if cfg.AMQP.Listen != "" || tlsWanted(cfg, cfg.AMQP.TLSListen) {
		if err := n.startAMQP(); err != nil {
			return nil, err
		}
	}
	scfg := shovel.Config{Store: n.local, Local: n.dialLocal, Sockets: n.shovelSockets, Node: n.nodeName(),
		MQTTExchange: cfg.MQTT.Exchange, Log: n.log.With("component", "shovel")}
	if n.repl != nil {
		scfg.Replicator = n.repl // cluster-wide definitions (shovels.go)
	}
	n.shovels = shovel.New(scfg)
	if cfg.Cluster.Enabled() {
		n.shovels.SetOwner(n.shovelOwner())
	}
	if err := n.declareBridges(); err != nil {
		return nil, err
	}
	if err := n.shovels.Start(); err != nil {
		return nil, fmt.Errorf("node: shovels: %w", err)
	}
	if cfg.Definitions != "" {
		if err := n.importShovels(cfg.Definitions); err != nil {
			return nil, err
		}
	}
	n.stopWatch = make(chan struct{})
	if limit := n.memoryLimit(); limit > 0 {
		go alarm.WatchMemory(n.broker, limit, limit*int64(cfg.Queues.MemoryPagingPercent)/100, n.stopWatch, n.log)
	}
	if limit := cfg.DiskFreeLimit; limit > 0 {
		go alarm.WatchDisk(n.broker.Alarms(), cfg.DataDir, int64(limit), cfg.DiskFreeCheckInterval, n.stopWatch, n.log)
	}
	// The other front ends, in this order: clustering first (it places
	// the durable queues before any client can reach them), then MQTT
	// and STOMP. Each does nothing when its listeners are disabled.
	for _, start := range []func() error{n.startCluster, n.startMQTT, n.startSTOMP, n.startStream} {
		if err := start(); err != nil {
			return nil, err
		}
	}
	if cfg.HTTP.Listen != "" || tlsWanted(cfg, cfg.HTTP.TLSListen) {
		if err := n.startHTTP(); err != nil {
			return nil, err
		}
	}
	if cfg.Prometheus.Listen != "" || tlsWanted(cfg, cfg.Prometheus.TLSListen) {
		if err := n.startMetrics(); err != nil {
			return nil, err
		}
	}
	if err := n.startTLS(); err != nil {
		return nil, err
	}
	return n, nil
}

// dialLocal is the transport of shovels' "amqp://" URIs: an in-process
// AMQP connection logged in as user, or, when user is "", one that
// authenticates the credentials the client sends as a remote client's
// (its peer address is not loopback).
func (n *Node) dialLocal(user string) (net.Conn, error) {
	if n.amqp == nil {
		return nil, errors.New("the AMQP listener is disabled")
	}
	if user == "" {
		return n.amqp.DialLocal(nil)
	}
	u, ok := n.users.Lookup(user)
	if !ok {
		return nil, fmt.Errorf("user '%s' (who declared the shovel) does not exist", user)
	}
	return n.amqp.DialLocal(u)
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return h
}

// HTTPAddr returns the management API's address, or nil when disabled.
func (n *Node) HTTPAddr() net.Addr {
	if n.httpLn == nil {
		return nil
	}
	return n.httpLn.Addr()
}

// connections adapts the protocol servers to web.Connections.
type connections struct{ n *Node }

func (c connections) ListConnections() []web.ConnectionInfo {
	var out []web.ConnectionInfo
	if c.n.amqp != nil {
		for _, i := range c.n.amqp.Connections() {
			ci := web.ConnectionInfo{Name: i.Name, Protocol: "AMQP 0-9-1", User: i.User, VHost: i.VHost,
				Peer: i.Peer, Local: i.Local, Channels: i.Channels, ConnectedAt: i.ConnectedAt,
				ClientProperties: i.ClientProperties, FrameMax: i.FrameMax, Heartbeat: i.Heartbeat,
				RecvOct: i.RecvOct, SendOct: i.SendOct, Published: i.Published, Delivered: i.Delivered,
				ChannelList: []web.ChannelInfo{}}
			for _, ch := range i.ChannelList {
				ci.ChannelList = append(ci.ChannelList, web.ChannelInfo(ch))
			}
			out = append(out, ci)
		}
	}
	for _, f := range c.n.frontEnds {
		out = append(out, f.ListConnections()...)
	}
	return out
}

func (c connections) CloseConnection(name, reason string) bool {
	if c.n.amqp != nil && c.n.amqp.CloseConnection(name, reason) {
		return true
	}
	for _, f := range c.n.frontEnds {
		if f.CloseConnection(name, reason) {
			return true
		}
	}
	return false
}

// frontEnd is a protocol front end other than AMQP, as the node runs it.
// Each lives in its own file of this package (mqtt.go, stomp.go, ...) with a
// startX method that Start calls and that appends to n.frontEnds.
type frontEnd interface {
	// Name is the protocol's name for logs, e.g. "mqtt".
	Name() string
	// Shutdown stops accepting, closes the front end's connections and
	// waits for them, or for ctx.
	Shutdown(ctx context.Context) error
	// ListConnections and CloseConnection serve the management API.
	ListConnections() []web.ConnectionInfo
	CloseConnection(name, reason string) bool
}

func (n *Node) startAMQP() error {
	c := n.cfg.AMQP
	var ln net.Listener
	if c.Listen != "" { // else only amqp.tls_listen serves (tls.go)
		var err error
		if ln, err = n.clientListen(c.Listen); err != nil {
			return fmt.Errorf("node: amqp.listen: %w", err)
		}
		n.amqpLn = ln
	}
	channelMax := c.ChannelMax // conf.Validate keeps it in [0, 65535]
	if channelMax == 0 {
		channelMax = 65535 // "no limit" in conf; amqp.Config takes 0 as "default"
	}
	n.amqp = amqp.NewServer(amqp.Config{
		FrameMax:         uint32(c.FrameMax), // conf.Validate: [4096, 2^32-1]
		InitialFrameMax:  uint32(c.InitialFrameMax),
		ChannelMax:       uint16(channelMax),
		Heartbeat:        c.Heartbeat,
		MaxMessageSize:   c.MaxMessageSize,
		HandshakeTimeout: c.HandshakeTimeout,
		Product:          c.Product,
		CertLogin:        n.amqpCertLogin(),
		ConsumerTimeout:  n.cfg.ConsumerTimeout,
		Tracer:           n.tracer,
	}, n.broker, n.users, n.log.With("component", "amqp"))
	n.amqpServed = make(chan error, 1)
	if ln == nil {
		n.amqpServed <- nil
		return nil
	}
	n.serveIn("amqp", ln, n.serveAMQP, func(err error) { n.amqpServed <- err })
	n.serve("amqp", ln.Addr())
	return nil
}

// AMQPAddr returns the address the AMQP listener is bound to, or nil when
// AMQP is disabled.
func (n *Node) AMQPAddr() net.Addr {
	if n.amqpLn == nil {
		return nil
	}
	return n.amqpLn.Addr()
}

// Broker returns the core.
func (n *Node) Broker() *exchange.Broker { return n.broker }

// Users returns the user database.
func (n *Node) Users() *auth.Users { return n.users }

// Close shuts the node down gracefully, in order: in a cluster, stop
// accepting clients, close them and hand the Raft leaderships this node
// holds to other voters (bounded), then stop accepting
// connections, close client connections (AMQP clients get connection.close
// 320 CONNECTION_FORCED) waiting for them until ctx is done, close the core,
// then flush and close the store. The store is closed even if ctx expires.
// Close is idempotent; later calls return the first call's result.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.close(ctx) })
	return n.closeErr
}

func (n *Node) close(ctx context.Context) error {
	var errs []error
	// In a cluster, clients are closed and the Raft leaderships handed
	// over first, as a drain does (drain.go).
	n.handOver(ctx)
	n.served.clear()
	if n.stopWatch != nil {
		close(n.stopWatch)
	}
	n.closeTLS()
	if n.http != nil {
		_ = n.http.Close()
	} else if n.httpLn != nil {
		n.httpLn.Close()
	}
	if n.api != nil {
		n.api.Close()
	}
	if n.metrics != nil {
		_ = n.metrics.Close()
	} else if n.metricsLn != nil {
		n.metricsLn.Close()
	}
	for i := len(n.frontEnds) - 1; i >= 0; i-- {
		f := n.frontEnds[i]
		if err := f.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("node: %s shutdown: %w", f.Name(), err))
		}
	}
	if n.shovels != nil {
		n.shovels.Close() // before the listeners: their connections end cleanly
	}
	if n.amqp != nil {
		// Shutdown stops accepting first, then closes every connection.
		if err := n.amqp.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("node: amqp shutdown: %w", err))
		}
		// In case Serve had not registered the listener when Shutdown ran.
		if n.amqpLn == nil {
			// amqp.tls_listen only
		} else if err := n.amqpLn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("node: close amqp listener: %w", err))
		}
		select {
		case <-n.amqpServed:
		case <-ctx.Done():
		}
	} else if n.amqpLn != nil {
		n.amqpLn.Close()
	}
	if err := n.closeTracing(ctx); err != nil {
		errs = append(errs, err)
	}
	if n.broker != nil {
		if err := n.broker.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: close core: %w", err))
		}
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: close store: %w", err))
		}
	}
	if n.auditCloser != nil {
		if err := n.auditCloser.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: close audit log: %w", err))
		}
	}
	return errors.Join(errs...)
}

// abort undoes a failed Start.
func (n *Node) abort() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing is serving yet worth waiting for
	if err := n.close(ctx); err != nil {
		n.log.Warn("cleanup after failed start", "err", err)
	}
}

// memoryLimit is the byte limit of the memory alarm for the node's
// configuration, 0 if none.
func (n *Node) memoryLimit() int64 {
	return alarm.MemoryLimit(int64(n.cfg.MemoryHighWatermarkBytes), n.cfg.MemoryHighWatermarkPercent, n.log)
}
