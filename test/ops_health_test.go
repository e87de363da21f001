package test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// Issue 39, part 1: every listener the node serves is listed in
// /api/overview and /api/nodes under RabbitMQ's protocol name, and
// RabbitMQ's health checks answer as RabbitMQ's do (200 {"status":"ok"},
// 503 {"status":"failed","reason":...}), to monitoring users only.

// healthListener is one listener as the API lists it.
type healthListener struct {
	Node       string         `json:"node"`
	Protocol   string         `json:"protocol"`
	IPAddress  string         `json:"ip_address"`
	Port       int            `json:"port"`
	SocketOpts map[string]any `json:"socket_opts"`
}

// healthBody is a health check's answer.
type healthBody struct {
	Status    string           `json:"status"`
	Reason    string           `json:"reason"`
	Protocol  string           `json:"protocol"`
	Port      int              `json:"port"`
	Missing   any              `json:"missing"`
	Protocols []string         `json:"protocols"`
	Ports     []int            `json:"ports"`
	Alarms    []map[string]any `json:"alarms"`
	Expired   []map[string]any `json:"expired"`
	Queues    []map[string]any `json:"queues"`
}

// check GETs a health check and decodes its answer, failing unless the
// status is want.
func (a apiClient) check(want int, path string) healthBody {
	a.t.Helper()
	data := a.expect(want, "GET", "/api/health/checks/"+path, nil)
	var h healthBody
	if err := json.Unmarshal(data, &h); err != nil {
		a.t.Fatalf("%s: %v in %s", path, err, data)
	}
	switch {
	case want == http.StatusOK && h.Status != "ok":
		a.t.Fatalf("%s: 200 with %s", path, data)
	case want == http.StatusServiceUnavailable && (h.Status != "failed" || h.Reason == ""):
		a.t.Fatalf("%s: 503 with %s", path, data)
	}
	return h
}

func portOf(t testing.TB, a net.Addr) int {
	t.Helper()
	if a == nil {
		t.Fatal("listener not open")
	}
	_, p, err := net.SplitHostPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// TestHealthListeners starts a node with every listener on 127.0.0.1:0,
// the TLS ones with a test certificate. Per listener: it accepts a
// connection (a TLS handshake for the TLS ones), its protocol-listener and
// port-listener checks answer 200, and /api/overview and /api/nodes list
// it under RabbitMQ's protocol name with its port.
func TestHealthListeners(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p, func(c *conf.Config) {
		c.MQTT.Listen, c.MQTT.WSListen = "127.0.0.1:0", "127.0.0.1:0"
		c.STOMP.Listen, c.STOMP.WSListen = "127.0.0.1:0", "127.0.0.1:0"
		c.HTTP.Listen, c.Prometheus.Listen = "127.0.0.1:0", "127.0.0.1:0"
	})
	a := apiClient{t: t, base: "http://" + b.n.HTTPAddr().String(), user: "guest", pass: "guest"}
	n := b.n
	listeners := []struct {
		protocol string
		addr     net.Addr
		tls      bool
	}{
		{"amqp", n.AMQPAddr(), false},
		{"amqp/ssl", n.AMQPTLSAddr(), true},
		{"mqtt", n.MQTTAddr(), false},
		{"mqtt/ssl", n.MQTTTLSAddr(), true},
		{"http/web-mqtt", n.MQTTWSAddr(), false},
		{"https/web-mqtt", n.MQTTWSSAddr(), true},
		{"stomp", n.STOMPAddr(), false},
		{"stomp/ssl", n.STOMPTLSAddr(), true},
		{"http/web-stomp", n.STOMPWSAddr(), false},
		{"https/web-stomp", n.STOMPWSSAddr(), true},
		{"http", n.HTTPAddr(), false},
		{"https", n.HTTPSAddr(), true},
		{"http/prometheus", n.MetricsAddr(), false},
		{"https/prometheus", n.MetricsTLSAddr(), true},
	}
	var overview struct {
		Node      string           `json:"node"`
		Listeners []healthListener `json:"listeners"`
	}
	a.getJSON("/api/overview", &overview)
	var nodes []struct {
		Name      string           `json:"name"`
		Listeners []healthListener `json:"listeners"`
	}
	a.getJSON("/api/nodes", &nodes)
	if len(nodes) != 1 || nodes[0].Name != overview.Node {
		t.Fatalf("/api/nodes: %+v", nodes)
	}
	if len(overview.Listeners) != len(listeners) || len(nodes[0].Listeners) != len(listeners) {
		t.Errorf("%d listeners in /api/overview, %d in /api/nodes; want %d: %+v",
			len(overview.Listeners), len(nodes[0].Listeners), len(listeners), overview.Listeners)
	}
	for _, l := range listeners {
		t.Run(strings.ReplaceAll(l.protocol, "/", "_"), func(t *testing.T) {
			a := a
			a.t = t
			port := portOf(t, l.addr)
			if l.tls {
				conn, err := tls.Dial("tcp", l.addr.String(), p.client())
				if err != nil {
					t.Fatalf("TLS handshake with %s: %v", l.addr, err)
				}
				conn.Close()
			} else {
				conn, err := net.Dial("tcp", l.addr.String())
				if err != nil {
					t.Fatalf("dial %s: %v", l.addr, err)
				}
				conn.Close()
			}
			if h := a.check(http.StatusOK, "protocol-listener/"+strings.ReplaceAll(l.protocol, "/", "%2F")); h.Protocol != l.protocol {
				t.Errorf("protocol-listener answers protocol %q", h.Protocol)
			}
			if h := a.check(http.StatusOK, "port-listener/"+strconv.Itoa(port)); h.Port != port {
				t.Errorf("port-listener answers port %d", h.Port)
			}
			for what, ls := range map[string][]healthListener{"/api/overview": overview.Listeners, "/api/nodes": nodes[0].Listeners} {
				i := slices.IndexFunc(ls, func(x healthListener) bool { return x.Protocol == l.protocol })
				if i < 0 {
					t.Fatalf("%s lists no %s listener: %+v", what, l.protocol, ls)
				}
				got := ls[i]
				if got.Port != port || got.IPAddress != "127.0.0.1" || got.Node != overview.Node || got.SocketOpts == nil {
					t.Errorf("%s lists %+v, want port %d on 127.0.0.1 of %s with socket_opts", what, got, port, overview.Node)
				}
			}
		})
	}

	// RabbitMQ's aliases and an escaped slash name the same listeners.
	for alias, want := range map[string]string{
		"amqp091": "amqp", "AMQP0-9-1": "amqp", "amqps": "amqp/ssl", "mqtt311": "mqtt", "mqtts": "mqtt/ssl",
		"mqtt+tls": "mqtt/ssl", "stomp1.2": "stomp", "stomps": "stomp/ssl", "stomp+ssl": "stomp/ssl",
		"web-mqtt": "http/web-mqtt", "webmqtt%2Ftls": "https/web-mqtt", "web_stomp": "http/web-stomp",
		"web-stomp+tls": "https/web-stomp", "management": "http", "https": "https",
		"prometheus": "http/prometheus", "prometheus%2Ftls": "https/prometheus", "http%2Fweb-stomp": "http/web-stomp",
	} {
		if h := a.check(http.StatusOK, "protocol-listener/"+alias); h.Protocol != want {
			t.Errorf("protocol-listener/%s answers %q, want %q", alias, h.Protocol, want)
		}
	}
	// Clustering is off: no clustering listener.
	if h := a.check(http.StatusServiceUnavailable, "protocol-listener/clustering"); h.Missing != "clustering" || len(h.Protocols) != len(listeners) {
		t.Errorf("protocol-listener/clustering without clustering: %+v", h)
	}
}

// TestHealthDisabledListeners: a node serving AMQP and HTTP alone answers
// 503 "No active listener" for the others, naming what it serves, and
// 400 for a port that is not a number.
func TestHealthDisabledListeners(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) { c.Prometheus.Listen = "" })
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	for _, p := range []string{"mqtt", "stomp", "web-mqtt", "web-stomp", "amqps", "https", "prometheus", "clustering"} {
		h := a.check(http.StatusServiceUnavailable, "protocol-listener/"+p)
		if h.Reason != "No active listener" || !slices.Equal(h.Protocols, []string{"amqp", "http"}) {
			t.Errorf("protocol-listener/%s: %+v", p, h)
		}
	}
	a.check(http.StatusOK, "protocol-listener/amqp")
	// A port nothing listens on (one just closed).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := portOf(t, ln.Addr())
	ln.Close()
	h := a.check(http.StatusServiceUnavailable, "port-listener/"+strconv.Itoa(closed))
	if h.Missing != float64(closed) || !slices.Equal(h.Ports, []int{portOf(t, b.n.AMQPAddr()), portOf(t, b.n.HTTPAddr())}) {
		t.Errorf("port-listener/%d: %+v", closed, h)
	}
	a.expect(http.StatusBadRequest, "GET", "/api/health/checks/port-listener/amqp", nil)
	// No TLS listener: no certificate to expire.
	a.check(http.StatusOK, "certificate-expiration/100/years")
}

// TestHealthChecks: alarms and local-alarms answer 503 naming the alarm
// while one is raised and 200 before and after; virtual-hosts and
// node-is-quorum-critical (a single node) answer 200; only a monitoring
// or administrator user may ask.
func TestHealthChecks(t *testing.T) {
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	a.check(http.StatusOK, "alarms")
	a.check(http.StatusOK, "local-alarms")
	b.n.Broker().Alarms().Set("memory", true)
	for path, reason := range map[string]string{"alarms": "There are alarms in effect in the cluster",
		"local-alarms": "There are alarms in effect on the node"} {
		h := a.check(http.StatusServiceUnavailable, path)
		if h.Reason != reason || len(h.Alarms) != 1 || h.Alarms[0]["resource"] != "memory" || h.Alarms[0]["node"] == "" {
			t.Errorf("%s during a memory alarm: %+v", path, h)
		}
	}
	b.n.Broker().Alarms().Set("memory", false)
	a.check(http.StatusOK, "alarms")
	a.check(http.StatusOK, "local-alarms")

	a.expect(http.StatusCreated, "PUT", "/api/vhosts/health-v", map[string]any{})
	a.check(http.StatusOK, "virtual-hosts")
	if h := a.check(http.StatusOK, "node-is-quorum-critical"); h.Reason != "single node cluster" {
		t.Errorf("node-is-quorum-critical on a single node: %+v", h)
	}

	// Who may ask: monitoring and administrator users; not a user with
	// the management tag alone, nor one without tags, nor anybody without
	// credentials.
	for user, tags := range map[string][]string{"h-mon": {"monitoring"}, "h-mgmt": {"management"},
		"h-policy": {"policymaker"}, "h-none": nil} {
		if err := b.n.Users().PutUser(user, "pw", tags); err != nil {
			t.Fatal(err)
		}
	}
	checks := []string{"alarms", "local-alarms", "virtual-hosts", "node-is-quorum-critical", "protocol-listener/amqp",
		"port-listener/" + strconv.Itoa(portOf(t, b.n.AMQPAddr())), "certificate-expiration/1/days"}
	for _, c := range checks {
		a.as("h-mon", "pw").check(http.StatusOK, c)
		for _, user := range []string{"h-mgmt", "h-policy", "h-none"} {
			a.as(user, "pw").expect(http.StatusUnauthorized, "GET", "/api/health/checks/"+c, nil)
		}
		a.as("", "").expect(http.StatusUnauthorized, "GET", "/api/health/checks/"+c, nil)
	}
}

// writeSelfSigned writes a self-signed certificate valid until notAfter
// and its key to dir, returning the files.
func writeSelfSigned(t testing.TB, dir string, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestHealthCertificateExpiration: with the TLS listeners' certificate
// expiring in 10 days, certificate-expiration answers 503 naming every
// TLS listener for a window that reaches past the expiry (11 days, 2
// weeks, 1 month, 1 year) and 200 for one that does not (9 days, 1 week,
// 0 years); a bad window is a 400 with RabbitMQ's reason.
func TestHealthCertificateExpiration(t *testing.T) {
	expires := time.Now().Add(10 * 24 * time.Hour)
	certFile, keyFile := writeSelfSigned(t, t.TempDir(), expires)
	_, base := mgmtBroker(t, func(c *conf.Config) {
		c.TLS.CertFile, c.TLS.KeyFile, c.TLS.CAFile = certFile, keyFile, certFile
		c.AMQP.TLSListen, c.MQTT.TLSListen, c.STOMP.TLSListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		c.HTTP.TLSListen = "127.0.0.1:0"
		c.MQTT.WSSListen, c.STOMP.WSSListen, c.Prometheus.TLSListen = "", "", ""
	})
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	for _, w := range []string{"9/days", "1/weeks", "0/years", "-5/DAYS"} {
		a.check(http.StatusOK, "certificate-expiration/"+w)
	}
	wantDate := expires.UTC().Format("2006-01-02 15:04:05")
	for _, w := range []string{"11/days", "2/weeks", "1/months", "1/years", "3/Weeks"} {
		h := a.check(http.StatusServiceUnavailable, "certificate-expiration/"+w)
		if h.Reason != "Certificates expiring" {
			t.Errorf("%s: reason %q", w, h.Reason)
		}
		protos := map[string]bool{}
		for _, e := range h.Expired {
			protos[e["protocol"].(string)] = true
			if e["certfile"] != certFile || e["cacertfile"] != certFile || e["node"] == "" {
				t.Errorf("%s: entry %v", w, e)
			}
			for _, k := range []string{"certfile_expires_on", "cacertfile_expires_on"} {
				if l, _ := e[k].([]any); len(l) != 1 || l[0] != wantDate {
					t.Errorf("%s: %s %v, want [%s]", w, k, e[k], wantDate)
				}
			}
		}
		want := map[string]bool{"amqp/ssl": true, "mqtt/ssl": true, "stomp/ssl": true, "https": true}
		if len(protos) != len(want) || len(h.Expired) != len(want) {
			t.Errorf("%s: listeners %v, want %v", w, protos, want)
		}
		for p := range want {
			if !protos[p] {
				t.Errorf("%s: %s not listed", w, p)
			}
		}
	}
	for path, reason := range map[string]string{
		"x/days":                      "Invalid expiration value.",
		"1.5/days":                    "Invalid expiration value.",
		"1/fortnights":                "Time unit not recognised. Supported units: days, weeks, months, years.",
		"1/hours":                     "Time unit not recognised. Supported units: days, weeks, months, years.",
		"999999999999999999999/years": "",
	} {
		if reason == "" { // out of range counts as a very long window, as RabbitMQ's bignums do
			a.check(http.StatusServiceUnavailable, "certificate-expiration/"+path)
			continue
		}
		data := a.expect(http.StatusBadRequest, "GET", "/api/health/checks/certificate-expiration/"+path, nil)
		if _, r := errorBody(t, data); r != reason {
			t.Errorf("%s: reason %q, want %q", path, r, reason)
		}
	}
	// The file on disk is what counts: a renewed certificate answers 200.
	renewed, renewedKey := writeSelfSigned(t, t.TempDir(), time.Now().Add(400*24*time.Hour))
	for src, dst := range map[string]string{renewed: certFile, renewedKey: keyFile} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a.check(http.StatusOK, "certificate-expiration/1/years")
	a.check(http.StatusServiceUnavailable, "certificate-expiration/2/years")
}

// TestHealthCluster on three processes: each node lists its gossip and
// inter-node ports as "clustering" (and its peers' AMQP listeners) in
// /api/overview, and answers protocol-listener/clustering and
// port-listener for both ports; node-is-quorum-critical answers 200 on
// every node while the three members of a quorum queue run, and 503
// naming the queue on the two left once one member is killed (stopping
// either would lose the queue's majority).
func TestHealthCluster(t *testing.T) {
	nodes := startCluster(t, 3, "--cluster-failure-detection", "fast")
	get := func(c *cnode, path string, out any) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+c.web+path, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("GET %s on %s: %v", path, c.name, err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("GET %s on %s: %v", path, c.name, err)
		}
		return resp.StatusCode
	}
	for _, c := range nodes {
		var ov struct {
			Listeners []healthListener `json:"listeners"`
		}
		get(c, "/api/overview", &ov)
		for _, addr := range []string{c.gossip, c.raft} {
			_, ps, _ := net.SplitHostPort(addr)
			port, _ := strconv.Atoi(ps)
			if !slices.ContainsFunc(ov.Listeners, func(l healthListener) bool {
				return l.Node == c.name && l.Protocol == "clustering" && l.Port == port
			}) {
				t.Errorf("%s: no clustering listener on %d in %+v", c.name, port, ov.Listeners)
			}
			var h healthBody
			if code := get(c, "/api/health/checks/port-listener/"+ps, &h); code != 200 || h.Status != "ok" {
				t.Errorf("%s: port-listener/%s: %d %+v", c.name, ps, code, h)
			}
		}
		for _, o := range nodes {
			_, ps, _ := net.SplitHostPort(o.p.AMQPAddr)
			port, _ := strconv.Atoi(ps)
			if !slices.ContainsFunc(ov.Listeners, func(l healthListener) bool {
				return l.Node == o.name && l.Protocol == "amqp" && l.Port == port
			}) {
				t.Errorf("%s: /api/overview lists no amqp listener of %s on %d: %+v", c.name, o.name, port, ov.Listeners)
			}
		}
		var h healthBody
		if code := get(c, "/api/health/checks/protocol-listener/clustering", &h); code != 200 || h.Protocol != "clustering" {
			t.Errorf("%s: protocol-listener/clustering: %d %+v", c.name, code, h)
		}
	}

	_, ch := dialNode(t, nodes[0])
	const q = "health-qq"
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a leader for "+q, func() bool { return nodes[0].queueLeader(t, "%2F/"+q) != "" })
	// Every member up: ok once the followers have answered the new
	// leader (until then a member counts as catching up, rightly).
	for _, c := range nodes {
		eventually(t, 10*time.Second, c.name+" not quorum critical with every member up", func() bool {
			var h healthBody
			return get(c, "/api/health/checks/node-is-quorum-critical", &h) == 200 && h.Status == "ok"
		})
	}
	if err := nodes[2].p.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, c := range nodes[:2] {
		var h healthBody
		eventually(t, 30*time.Second, c.name+" quorum critical", func() bool {
			h = healthBody{}
			return get(c, "/api/health/checks/node-is-quorum-critical", &h) == 503
		})
		if h.Status != "failed" || !strings.Contains(h.Reason, "would lose their quorum") || len(h.Queues) != 1 ||
			h.Queues[0]["name"] != q || h.Queues[0]["virtual_host"] != "/" || h.Queues[0]["readable_name"] != "queue '"+q+"' in vhost '/'" {
			t.Errorf("%s: %+v", c.name, h)
		}
	}
}
