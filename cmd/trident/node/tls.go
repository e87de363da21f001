package node

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/protocol/amqp"
	"github.com/trident-broker/trident/protocol/mqtt"
	"github.com/trident-broker/trident/protocol/stomp"
	"github.com/trident-broker/trident/protocol/stream"
)

// The TLS listeners: AMQPS, MQTTS, STOMP over TLS, MQTT and STOMP over
// secure WebSocket, HTTPS for the management API and for Prometheus. Each
// serves the same front end as its plain twin (which may be disabled) on a
// tls.Listener; the certificate, key and CA come from conf.TLS and are
// re-read when the files change (see certReloader).

// tlsCheckInterval is how often, at most, a new TLS connection makes the
// reloader look at the files' modification times.
var tlsCheckInterval = time.Second

// tlsWanted reports whether the TLS listener at addr is to be started.
func tlsWanted(c conf.Config, addr string) bool { return c.TLS.Enabled() && addr != "" }

// certLogin maps conf.TLS to the front ends' certificate login.
func certLogin(c conf.TLS) *auth.CertLogin {
	return &auth.CertLogin{From: c.CertLoginFrom, SANType: c.CertLoginSANType}
}

// amqpCertLogin is amqp.Config.CertLogin: SASL EXTERNAL is offered
// whenever TLS is on (only to clients with a verified certificate).
func (n *Node) amqpCertLogin() *auth.CertLogin {
	if !n.cfg.TLS.Enabled() {
		return nil
	}
	return certLogin(n.cfg.TLS)
}

// mqttCertLogin and stompCertLogin are their front ends' CertLogin: set
// when TLS is on and mqtt.cert_login / stomp.cert_login is true.
func (n *Node) mqttCertLogin() *auth.CertLogin {
	if !n.cfg.TLS.Enabled() || !n.cfg.MQTT.CertLogin {
		return nil
	}
	return certLogin(n.cfg.TLS)
}

func (n *Node) stompCertLogin() *auth.CertLogin {
	if !n.cfg.TLS.Enabled() || !n.cfg.STOMP.CertLogin {
		return nil
	}
	return certLogin(n.cfg.TLS)
}

// tlsListener is one open TLS listener.
type tlsListener struct {
	key      string // the config key, e.g. "amqp.tls_listen"
	protocol string // as the API lists it, e.g. "amqp/ssl"
	raw      net.Listener
	http     *http.Server // for WSS listeners, which have their own server
}

// tlsListeners are the node's TLS listeners and their certificates.
type tlsListeners struct {
	certs *certReloader
	lns   []tlsListener
}

// tlsState publishes the node's tlsListeners once they are all open: the
// API lists listeners while startTLS runs.
type tlsState struct{ p atomic.Pointer[tlsListeners] }

// get returns the TLS listeners, or nil before startTLS or without TLS.
func (s *tlsState) get() *tlsListeners { return s.p.Load() }

// startTLS opens the TLS listeners. It runs after every front end, the
// API and the metrics server have started, and serves each of them on a
// TLS listener too.
func (n *Node) startTLS() error {
	c := n.cfg
	if !c.TLS.Enabled() {
		return nil
	}
	certs, err := newCertReloader(c.TLS, n.log.With("component", "tls"))
	if err != nil {
		return err
	}
	t := &tlsListeners{certs: certs}
	defer n.tls.p.Store(t) // also on error: Close (via abort) closes what opened
	tc := certs.serverConfig()
	listen := func(key, protocol, addr string, serve func(net.Listener)) error {
		if addr == "" {
			return nil
		}
		raw, err := n.tlsRaw(key, addr)
		if err != nil {
			return fmt.Errorf("node: %s: %w", key, err)
		}
		t.lns = append(t.lns, tlsListener{key: key, protocol: protocol, raw: raw})
		serve(tls.NewListener(raw, tc))
		n.serveTLS(protocol, raw.Addr())
		n.log.Info("listening", "protocol", protocol, "addr", raw.Addr().String())
		return nil
	}
	// wss serves h at /ws on its own HTTP server.
	wss := func(h http.Handler) func(net.Listener) {
		return func(ln net.Listener) {
			mux := http.NewServeMux()
			mux.Handle("/ws", h)
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
				ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelDebug)} // handshake failures
			t.lns[len(t.lns)-1].http = srv
			n.serveIn("wss", ln, srv.Serve, nil)
		}
	}
	// serveQuiet runs a protocol server's Serve, logging unexpected ends.
	serveQuiet := func(name string, serve func(net.Listener) error) func(net.Listener) {
		return func(ln net.Listener) {
			n.serveIn(name, ln, serve, nil)
		}
	}

	if n.amqp != nil {
		if err := listen("amqp.tls_listen", "amqp/ssl", c.AMQP.TLSListen, serveQuiet("amqps", n.serveAMQP)); err != nil {
			return err
		}
	}
	for _, f := range n.frontEnds {
		switch f := f.(type) {
		case *mqttFrontEnd:
			if err := listen("mqtt.tls_listen", "mqtt/ssl", c.MQTT.TLSListen, serveQuiet("mqtts", f.srv.Serve)); err != nil {
				return err
			}
			if err := listen("mqtt.wss_listen", "https/web-mqtt", c.MQTT.WSSListen, wss(f.srv.WebSocketHandler())); err != nil {
				return err
			}
		case *stompFrontEnd:
			if err := listen("stomp.tls_listen", "stomp/ssl", c.STOMP.TLSListen, serveQuiet("stomps", f.srv.Serve)); err != nil {
				return err
			}
			if err := listen("stomp.wss_listen", "https/web-stomp", c.STOMP.WSSListen, wss(f.srv)); err != nil {
				return err
			}
		case *streamFrontEnd:
			if err := listen("stream.tls_listen", "stream/ssl", c.Stream.TLSListen, serveQuiet("streams", f.srv.Serve)); err != nil {
				return err
			}
		}
	}
	if n.http != nil {
		if err := listen("http.tls_listen", "https", c.HTTP.TLSListen, serveQuiet("https", n.http.Serve)); err != nil {
			return err
		}
	}
	if n.metrics != nil {
		if err := listen("prometheus.tls_listen", "https/prometheus", c.Prometheus.TLSListen, serveQuiet("prometheus https", n.metrics.Serve)); err != nil {
			return err
		}
	}
	return nil
}

func logServeErr(log *slog.Logger, name string, err error) {
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) ||
		errors.Is(err, amqp.ErrServerClosed) || errors.Is(err, mqtt.ErrServerClosed) || errors.Is(err, stomp.ErrServerClosed) || errors.Is(err, stream.ErrServerClosed) {
		return
	}
	log.Error("listener stopped", "listener", name, "err", err)
}

// closeTLS stops accepting on the TLS listeners. Their connections belong
// to the front ends, which close them in their own Shutdown.
func (n *Node) closeTLS() {
	t := n.tls.get()
	if t == nil {
		return
	}
	for _, l := range t.lns {
		if l.http != nil {
			_ = l.http.Close()
		}
		_ = l.raw.Close()
	}
}

// ReloadTLS re-reads the certificate, key and CA files now (on SIGHUP);
// new connections get the new certificate, open ones keep theirs. On error
// the previous certificate stays in use. Without TLS it does nothing.
func (n *Node) ReloadTLS() error {
	var errs []error
	if f := n.clusterFront(); f != nil && f.raft != nil && f.raft.certs != nil {
		errs = append(errs, f.raft.certs.reload()) // cluster.tls
	}
	if t := n.tls.get(); t != nil {
		errs = append(errs, t.certs.reload())
	}
	return errors.Join(errs...)
}

func (n *Node) tlsAddr(key string) net.Addr {
	t := n.tls.get()
	if t == nil {
		return nil
	}
	for _, l := range t.lns {
		if l.key == key {
			return l.raw.Addr()
		}
	}
	return nil
}

// AMQPTLSAddr returns the AMQPS listener's address, or nil when disabled.
func (n *Node) AMQPTLSAddr() net.Addr { return n.tlsAddr("amqp.tls_listen") }

// MQTTTLSAddr returns the MQTTS listener's address, or nil when disabled.
func (n *Node) MQTTTLSAddr() net.Addr { return n.tlsAddr("mqtt.tls_listen") }

// MQTTWSSAddr returns the MQTT over secure WebSocket listener's address
// (wss://ADDR/ws), or nil when disabled.
func (n *Node) MQTTWSSAddr() net.Addr { return n.tlsAddr("mqtt.wss_listen") }

// STOMPTLSAddr returns the STOMP over TLS listener's address, or nil.
func (n *Node) STOMPTLSAddr() net.Addr { return n.tlsAddr("stomp.tls_listen") }

// STOMPWSSAddr returns the Web-STOMP over secure WebSocket listener's
// address (wss://ADDR/ws), or nil when disabled.
func (n *Node) STOMPWSSAddr() net.Addr { return n.tlsAddr("stomp.wss_listen") }

// HTTPSAddr returns the management API's HTTPS address, or nil.
func (n *Node) HTTPSAddr() net.Addr { return n.tlsAddr("http.tls_listen") }

// MetricsTLSAddr returns the Prometheus HTTPS listener's address, or nil.
func (n *Node) MetricsTLSAddr() net.Addr { return n.tlsAddr("prometheus.tls_listen") }

// certReloader holds the TLS server configuration built from the
// certificate, key and CA files, and rebuilds it when the files change.
// Every handshake goes through GetConfigForClient, so a new connection
// gets the current certificate and CA pool; an established one is not
// touched.
type certReloader struct {
	c   conf.TLS
	log *slog.Logger

	cur       atomic.Pointer[tls.Config]
	nextCheck atomic.Int64 // unix nanos before which files are not stat'ed

	mu    sync.Mutex // serialises reloads
	stamp string     // the files' sizes and modification times when loaded
}

func newCertReloader(c conf.TLS, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{c: c, log: log}
	if err := r.reload(); err != nil {
		return nil, err
	}
	r.nextCheck.Store(time.Now().Add(tlsCheckInterval).UnixNano())
	return r, nil
}

func (r *certReloader) minVersion() uint16 {
	if r.c.MinVersion == "1.3" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

// serverConfig returns the config the listeners use: it only hands every
// client hello the current config.
func (r *certReloader) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: r.minVersion(),
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			r.maybeReload()
			return r.cur.Load(), nil
		},
	}
}

// maybeReload reloads when the files changed, looking at most once per
// tlsCheckInterval.
func (r *certReloader) maybeReload() {
	now := time.Now().UnixNano()
	next := r.nextCheck.Load()
	if now < next || !r.nextCheck.CompareAndSwap(next, now+int64(tlsCheckInterval)) {
		return
	}
	if stamp, err := r.fileStamp(); err == nil && stamp == r.loadedStamp() {
		return
	}
	if err := r.reload(); err != nil {
		r.log.Warn("TLS files changed but cannot be loaded; keeping the previous certificate", "err", err)
	}
}

func (r *certReloader) loadedStamp() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stamp
}

// fileStamp describes the files' sizes and modification times.
func (r *certReloader) fileStamp() (string, error) {
	var b bytes.Buffer
	for _, p := range []string{r.c.CertFile, r.c.KeyFile, r.c.CAFile} {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

// reload reads the files and swaps the config in; on error the previous
// config stays.
func (r *certReloader) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamp, _ := r.fileStamp()
	cfg, err := r.build()
	if err != nil {
		return err
	}
	prev := r.cur.Swap(cfg)
	r.stamp = stamp
	if prev != nil {
		r.log.Info("TLS certificate reloaded", "cert_file", r.c.CertFile)
	}
	return nil
}

func (r *certReloader) build() (*tls.Config, error) {
	c := r.c
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node: tls.cert_file/tls.key_file: %w", err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   r.minVersion(),
		ClientAuth:   tls.NoClientCert,
	}
	if c.VerifyPeer() {
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if c.FailIfNoPeerCert {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("node: tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("node: tls.ca_file %s: no PEM certificate in it", c.CAFile)
		}
		cfg.ClientCAs = pool
	}
	return cfg, nil
}
