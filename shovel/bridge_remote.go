package shovel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// A bridge's remote end is an MQTT client: paho.mqtt.golang for MQTT 3.1
// and 3.1.1, paho.golang for MQTT 5. Both are driven the same way
// (remote): acknowledgements are manual, so that a QoS 1 message is
// acknowledged to the remote broker only once it is stored here, and a
// publish returns only once the remote broker acknowledged it.

// remoteMsg is a message the remote broker sent; ack acknowledges it
// (PUBACK; nothing for QoS 0), and must be called in arrival order.
type remoteMsg struct {
	topic   string
	payload []byte
	qos     byte
	retain  bool
	ack     func()
}

// remoteSub is one subscription on the remote broker.
type remoteSub struct {
	filter string
	qos    byte
}

// remote is a connected MQTT client of the remote broker.
type remote interface {
	// publish sends a message and, at QoS 1 or 2, returns once the
	// remote broker acknowledged it.
	publish(ctx context.Context, topic string, qos byte, retain bool, payload []byte) error
	subscribe(ctx context.Context, subs []remoteSub) error
	// lost is closed or sent on when the connection ends.
	lost() <-chan error
	close()
}

// errRemoteRefused is a publish or subscription the remote refused.
var errRemoteRefused = errors.New("refused by the remote broker")

// remoteConfig is what a remote client needs.
type remoteConfig struct {
	def      *BridgeDefinition
	clientID string
	dial     func() (net.Conn, error) // connected, TLS done
	in       chan<- remoteMsg
	stop     <-chan struct{} // closed when the bridge stops: handlers give up
}

// deliver hands m to the bridge unless it stopped.
func (c *remoteConfig) deliver(m remoteMsg) {
	select {
	case c.in <- m:
	case <-c.stop:
	}
}

// tlsConfig builds the TLS configuration of a bridge for host, as
// Mosquitto's bridge_cafile, bridge_certfile/keyfile and bridge_insecure
// (the certificate chain is still verified; only the host name is not).
func (d *BridgeDefinition) tlsConfig(host string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if d.CAFile != "" {
		pem, err := os.ReadFile(d.CAFile)
		if err != nil {
			return nil, fmt.Errorf("bridge_cafile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("bridge_cafile %s: no PEM certificate", d.CAFile)
		}
		cfg.RootCAs = pool
	}
	if d.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(d.CertFile, d.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("bridge_certfile/bridge_keyfile: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if d.Insecure {
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true // the chain is verified below, without the host name
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return cfg, nil
}

// dialRemote returns a dialer of addr: a TCP connection recorded in the
// node's Sockets (never "from loopback" on this node's listeners), with
// TLS when the bridge has it. The handshake deadline stays set; the
// caller clears it once connected.
func (w *worker) remoteDialer(addr string) func() (net.Conn, error) {
	return func() (net.Conn, error) {
		c, err := w.m.sockets.dial(handshakeTimeout)("tcp", addr)
		if err != nil {
			return nil, err
		}
		if !w.bridge.TLS {
			return c, nil
		}
		host, _, _ := net.SplitHostPort(addr)
		cfg, err := w.bridge.tlsConfig(host)
		if err != nil {
			c.Close()
			return nil, err
		}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
}

// connectRemote connects to the remote broker by the first of its
// addresses that answers.
func (w *worker) connectRemote(ctx context.Context, in chan<- remoteMsg, stop <-chan struct{}) (remote, string, error) {
	d := w.bridge
	cid := d.ClientID
	if cid == "" {
		cid = defaultClientID(w.m.node, w.vhost, w.name)
	}
	for _, addr := range d.Addresses {
		var conn net.Conn
		dial := w.remoteDialer(addr)
		rc := &remoteConfig{def: d, clientID: cid, in: in, stop: stop, dial: func() (net.Conn, error) {
			c, err := dial()
			conn = c
			return c, err
		}}
		var r remote
		var err error
		if d.ProtocolVersion == BridgeMQTT50 {
			r, err = connect5(ctx, rc)
		} else {
			r, err = connect311(rc)
		}
		if err == nil {
			if conn != nil {
				_ = conn.SetDeadline(time.Time{})
			}
			return r, addr, nil
		}
		w.m.log.Debug("bridge connection failed", "vhost", w.vhost, "bridge", w.name, "address", addr, "err", err)
	}
	// As a shovel's: the API says no more (a bridge is no port scanner);
	// the log has each address's error at debug level.
	return nil, "", connectError{end: "remote"}
}

// client311 is an MQTT 3.1/3.1.1 connection (paho.mqtt.golang).
type client311 struct {
	c      mqtt.Client
	lostCh chan error
}

func connect311(rc *remoteConfig) (remote, error) {
	d := rc.def
	r := &client311{lostCh: make(chan error, 1)}
	o := mqtt.NewClientOptions().AddBroker("tcp://bridge-remote").SetClientID(rc.clientID).
		SetCleanSession(d.CleanSession).SetKeepAlive(d.KeepAlive).SetPingTimeout(10 * time.Second).
		SetConnectTimeout(handshakeTimeout).SetAutoReconnect(false).SetConnectRetry(false).
		SetAutoAckDisabled(true).SetOrderMatters(true).SetResumeSubs(false).SetWriteTimeout(30 * time.Second)
	if d.ProtocolVersion == BridgeMQTT31 {
		o.SetProtocolVersion(3)
	} else {
		o.SetProtocolVersion(4)
	}
	if d.Username != "" {
		o.SetUsername(d.Username)
		o.SetPassword(d.Password)
	}
	o.SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) {
		rc.deliver(remoteMsg{topic: m.Topic(), payload: m.Payload(), qos: m.Qos(), retain: m.Retained(), ack: m.Ack})
	})
	o.SetConnectionLostHandler(func(_ mqtt.Client, err error) {
		select {
		case r.lostCh <- err:
		default:
		}
	})
	o.SetCustomOpenConnectionFn(func(*url.URL, mqtt.ClientOptions) (net.Conn, error) { return rc.dial() })
	r.c = mqtt.NewClient(o)
	t := r.c.Connect()
	if !t.WaitTimeout(handshakeTimeout + time.Second) {
		r.c.Disconnect(0)
		return nil, errors.New("no CONNACK")
	}
	if err := t.Error(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *client311) publish(ctx context.Context, topic string, qos byte, retain bool, payload []byte) error {
	t := r.c.Publish(topic, qos, retain, payload)
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *client311) subscribe(ctx context.Context, subs []remoteSub) error {
	if len(subs) == 0 {
		return nil
	}
	filters := make(map[string]byte, len(subs))
	for _, s := range subs {
		filters[s.filter] = s.qos
	}
	t := r.c.SubscribeMultiple(filters, nil)
	select {
	case <-t.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := t.Error(); err != nil {
		return err
	}
	for f, q := range t.(*mqtt.SubscribeToken).Result() {
		if q >= 0x80 {
			return fmt.Errorf("subscription to '%s' %w", f, errRemoteRefused)
		}
	}
	return nil
}

func (r *client311) lost() <-chan error { return r.lostCh }
func (r *client311) close()             { r.c.Disconnect(250) }

// client5 is an MQTT 5 connection (paho.golang).
type client5 struct {
	c      *paho.Client
	conn   net.Conn
	lostCh chan error
	once   sync.Once
}

func (r *client5) fail(err error) {
	select {
	case r.lostCh <- err:
	default:
	}
}

func connect5(ctx context.Context, rc *remoteConfig) (remote, error) {
	d := rc.def
	conn, err := rc.dial()
	if err != nil {
		return nil, err
	}
	r := &client5{conn: conn, lostCh: make(chan error, 1)}
	var c *paho.Client
	c = paho.NewClient(paho.ClientConfig{ClientID: rc.clientID, Conn: packets.NewThreadSafeConn(conn),
		EnableManualAcknowledgment: true, SendAcksInterval: 20 * time.Millisecond, PacketTimeout: 30 * time.Second,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			pk := p.Packet
			rc.deliver(remoteMsg{topic: pk.Topic, payload: pk.Payload, qos: pk.QoS, retain: pk.Retain, ack: func() { _ = c.Ack(pk) }})
			return true, nil
		}},
		OnClientError: r.fail,
		OnServerDisconnect: func(dc *paho.Disconnect) {
			r.fail(fmt.Errorf("DISCONNECT from the remote broker, reason 0x%02x", dc.ReasonCode))
		},
	})
	r.c = c
	cp := &paho.Connect{ClientID: rc.clientID, KeepAlive: uint16(d.KeepAlive / time.Second), CleanStart: d.CleanSession}
	if d.Username != "" {
		cp.Username, cp.UsernameFlag = d.Username, true
		cp.Password, cp.PasswordFlag = []byte(d.Password), d.Password != ""
	}
	if !d.CleanSession {
		never := uint32(0xFFFFFFFF) // the session outlives the connection, as Mosquitto's bridges ask
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &never}
	}
	cctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	ca, err := c.Connect(cctx, cp)
	if err != nil {
		conn.Close()
		if ca != nil {
			return nil, fmt.Errorf("CONNACK reason 0x%02x", ca.ReasonCode)
		}
		return nil, err
	}
	go func() {
		<-c.Done()
		r.fail(errors.New("connection closed"))
	}()
	return r, nil
}

func (r *client5) publish(ctx context.Context, topic string, qos byte, retain bool, payload []byte) error {
	resp, err := r.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: payload})
	if err != nil {
		return err
	}
	if resp != nil && resp.ReasonCode >= 0x80 {
		return fmt.Errorf("publish to '%s' %w (reason 0x%02x)", topic, errRemoteRefused, resp.ReasonCode)
	}
	return nil
}

func (r *client5) subscribe(ctx context.Context, subs []remoteSub) error {
	if len(subs) == 0 {
		return nil
	}
	s := &paho.Subscribe{}
	for _, x := range subs {
		// No-local: what the bridge publishes there does not come back.
		s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{Topic: x.filter, QoS: x.qos, NoLocal: true, RetainAsPublished: true})
	}
	sa, err := r.c.Subscribe(ctx, s)
	if err != nil {
		return err
	}
	for i, code := range sa.Reasons {
		if code >= 0x80 && i < len(subs) {
			return fmt.Errorf("subscription to '%s' %w (reason 0x%02x)", subs[i].filter, errRemoteRefused, code)
		}
	}
	return nil
}

func (r *client5) lost() <-chan error { return r.lostCh }

func (r *client5) close() {
	r.once.Do(func() {
		_ = r.c.Disconnect(&paho.Disconnect{ReasonCode: 0})
		r.conn.Close()
	})
}
