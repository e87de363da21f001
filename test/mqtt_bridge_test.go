package test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/trident-broker/trident/cmd/trident/node"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// MQTT bridges (issue 42 item 3): a Trident edge forwarding topics to and
// from a remote broker (a second Trident process, or Mosquitto), as
// Mosquitto's connection blocks, run by the shovel manager.

// bridgeNode is a trident process with MQTT and the management API.
type bridgeNode struct {
	p    *testbin.Proc
	mqtt string // host:port
	api  apiClient
}

func freeAddr(t testing.TB) string {
	t.Helper()
	port, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// startBridgeNode starts trident with MQTT and HTTP on free ports; extra
// arguments follow.
func startBridgeNode(t *testing.T, extra ...string) *bridgeNode {
	t.Helper()
	mq, web := freeAddr(t), freeAddr(t)
	p := testbin.Start(t, append([]string{"--mqtt-listen", mq, "--http-listen", web}, extra...)...)
	return &bridgeNode{p: p, mqtt: mq, api: apiClient{t: t, base: "http://" + web, user: "guest", pass: "guest"}}
}

// bridgeState returns a bridge's status from the API (nil if not listed).
func bridgeState(api apiClient, vhost, name string) map[string]any {
	var list []map[string]any
	code, body := api.do("GET", "/api/mqtt/bridges", nil)
	if code != 200 || jsonUnmarshal(body, &list) != nil {
		return nil
	}
	for _, b := range list {
		if b["name"] == name && b["vhost"] == vhost {
			return b
		}
	}
	return nil
}

// waitBridge waits until the bridge's state is state, within d.
func waitBridge(t *testing.T, api apiClient, name, state string, d time.Duration) map[string]any {
	t.Helper()
	var last map[string]any
	eventually(t, d, "bridge "+name+" "+state, func() bool {
		last = bridgeState(api, "/", name)
		return last != nil && last["state"] == state
	})
	return last
}

// mqttIn connects a 3.1.1 client as guest to addr.
func mqttIn(t *testing.T, addr, id string, clean bool) *client3 {
	t.Helper()
	return dial3(t, "tcp://"+addr, id, clean, func(o *mqtt3.ClientOptions) { o.SetUsername("guest").SetPassword("guest") })
}

// recv3 waits for a message on c, up to d.
func recv3(t *testing.T, c *client3, d time.Duration) msg3 {
	t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case <-time.After(d):
		t.Fatalf("no MQTT message within %s", d)
	}
	return msg3{}
}

// TestMQTTBridgeTridentToTrident: an edge Trident bridges to a second
// Trident process ("cloud"): out rules with prefixes reach the cloud's
// subscribers under the remote prefix at QoS 1, in rules reach the edge's
// under the local prefix; a "both" rule moves each message once (no
// loop); the same over MQTT 5 (bridge_protocol_version mqttv50); the API
// shows the bridges running with their counts.
func TestMQTTBridgeTridentToTrident(t *testing.T) {
	cloud := startBridgeNode(t)
	edge := startBridgeNode(t)
	for i, ver := range []string{"mqttv311", "mqttv50"} {
		name := "cloud-" + ver
		site := fmt.Sprintf("site%d/", i)
		edge.api.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/"+name, map[string]any{"value": map[string]any{
			"address": cloud.mqtt, "remote_username": "guest", "remote_password": "guest",
			"remote_clientid": "edge-" + ver, "bridge_protocol_version": ver, "restart_timeout": 1,
			"topic": []any{
				"sensors/# out 1 " + ver + "/ " + site,
				map[string]any{"pattern": "cmd/#", "direction": "in", "qos": 1, "local_prefix": ver + "/", "remote_prefix": site},
				"sync/# both 1 " + ver + "/ " + site,
			}}})
		waitBridge(t, edge.api, name, "running", 30*time.Second)

		// out: edge "<ver>/sensors/t1" → cloud "<site>sensors/t1", QoS 1.
		cloudSub := mqttIn(t, cloud.mqtt, "cloud-sub-"+ver, true)
		cloudSub.subscribe(t, site+"#", 1)
		edgeSub := mqttIn(t, edge.mqtt, "edge-sub-"+ver, true)
		edgeSub.subscribe(t, ver+"/cmd/#", 1)
		edgeSub.subscribe(t, ver+"/sync/#", 1)
		edgePub := mqttIn(t, edge.mqtt, "edge-pub-"+ver, true)
		edgePub.publish(t, ver+"/sensors/t1", 1, false, "hot")
		if m := recv3(t, cloudSub, 10*time.Second); m.topic != site+"sensors/t1" || m.payload != "hot" || m.qos != 1 {
			t.Fatalf("%s out: cloud got %+v, want %ssensors/t1 \"hot\" at QoS 1", ver, m, site)
		}
		// Not the local prefix's other topics.
		edgePub.publish(t, "elsewhere/sensors/t1", 1, false, "no")

		// in: cloud "<site>cmd/reboot" → edge "<ver>/cmd/reboot".
		cloudPub := mqttIn(t, cloud.mqtt, "cloud-pub-"+ver, true)
		cloudPub.publish(t, site+"cmd/reboot", 1, false, "now")
		if m := recv3(t, edgeSub, 10*time.Second); m.topic != ver+"/cmd/reboot" || m.payload != "now" || m.qos != 1 {
			t.Fatalf("%s in: edge got %+v, want %s/cmd/reboot \"now\" at QoS 1", ver, m, ver)
		}
		if m := recv3(t, cloudSub, 10*time.Second); m.topic != site+"cmd/reboot" {
			t.Fatalf("%s: cloud subscriber got %+v, want its own publish %scmd/reboot", ver, m, site)
		}

		// both: once each way, and nothing comes back round.
		edgePub.publish(t, ver+"/sync/a", 1, false, "from-edge")
		if m := recv3(t, cloudSub, 10*time.Second); m.topic != site+"sync/a" || m.payload != "from-edge" {
			t.Fatalf("%s both out: cloud got %+v", ver, m)
		}
		if m := recv3(t, edgeSub, 10*time.Second); m.topic != ver+"/sync/a" || m.payload != "from-edge" {
			t.Fatalf("%s both: edge subscriber got %+v, want its publish", ver, m)
		}
		cloudPub.publish(t, site+"sync/b", 1, false, "from-cloud")
		if m := recv3(t, cloudSub, 10*time.Second); m.topic != site+"sync/b" || m.payload != "from-cloud" {
			t.Fatalf("%s both in: cloud subscriber got %+v", ver, m)
		}
		if m := recv3(t, edgeSub, 10*time.Second); m.topic != ver+"/sync/b" || m.payload != "from-cloud" {
			t.Fatalf("%s both in: edge got %+v", ver, m)
		}
		cloudSub.none(t, 1500*time.Millisecond) // no echo, no loop
		edgeSub.none(t, 100*time.Millisecond)

		var st map[string]any
		eventually(t, 10*time.Second, ver+": the counts", func() bool {
			st = bridgeState(edge.api, "/", name)
			return num(st["messages_out"]) >= 2 && num(st["messages_in"]) >= 2
		})
		if st["state"] != "running" || st["address"] != cloud.mqtt || st["bridge_protocol_version"] != ver {
			t.Fatalf("%s: bridge status %v", ver, st)
		}
		// The password is not shown back.
		var p map[string]any
		edge.api.getJSON("/api/parameters/mqtt-bridge/%2F/"+name, &p)
		if v, _ := p["value"].(map[string]any); v["remote_password"] != "***" {
			t.Fatalf("%s: parameter shows %v", ver, p)
		}
	}
	// Deleted: gone from the API, and its out queue too.
	edge.api.expect(204, "DELETE", "/api/parameters/mqtt-bridge/%2F/cloud-mqttv311", nil)
	if st := bridgeState(edge.api, "/", "cloud-mqttv311"); st != nil {
		t.Fatalf("deleted bridge still listed: %v", st)
	}
	edge.api.expect(404, "GET", "/api/queues/%2F/mqtt-bridge.cloud-mqttv311", nil)
}

// collector is a persistent-session QoS 1 subscriber that reconnects by
// itself (its broker may be killed) and records the payloads it got.
type collector struct {
	mu   sync.Mutex
	got  map[string]int
	c    mqtt3.Client
	name string
}

func newCollector(t *testing.T, addr, id, filter string) *collector {
	t.Helper()
	col := &collector{got: map[string]int{}, name: id}
	o := mqtt3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(false).
		SetUsername("guest").SetPassword("guest").SetProtocolVersion(4).
		SetAutoReconnect(true).SetMaxReconnectInterval(300 * time.Millisecond).SetConnectRetry(true).
		SetConnectRetryInterval(300 * time.Millisecond).SetConnectTimeout(3 * time.Second).SetOrderMatters(true).
		SetDefaultPublishHandler(func(_ mqtt3.Client, m mqtt3.Message) {
			col.mu.Lock()
			col.got[string(m.Payload())]++
			col.mu.Unlock()
		})
	col.c = mqtt3.NewClient(o)
	if tok := col.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("collector %s: connect: %v", id, tok.Error())
	}
	if tok := col.c.Subscribe(filter, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("collector %s: subscribe: %v", id, tok.Error())
	}
	t.Cleanup(func() { col.c.Disconnect(50) })
	return col
}

// missing lists the payloads prefix0..prefix(n-1) not received.
func (c *collector) missing(prefix string, n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for i := 0; i < n; i++ {
		if c.got[prefix+strconv.Itoa(i)] == 0 {
			out = append(out, prefix+strconv.Itoa(i))
		}
	}
	return out
}

// waitAll waits up to a minute for out's payloads op0..op(no-1) and in's
// ip0..ip(ni-1), and names what is missing if they do not all come.
func waitAll(t *testing.T, what string, out *collector, op string, no int, in *collector, ip string, ni int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		mo, mi := out.missing(op, no), in.missing(ip, ni)
		if len(mo) == 0 && len(mi) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: lost out %d %v, lost in %d %v", what, len(mo), head(mo), len(mi), head(mi))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func head(l []string) []string {
	if len(l) > 10 {
		return l[:10]
	}
	return l
}

// publishRange publishes payloads prefix<from>..prefix<to-1> at QoS 1 to
// topic/<i> on addr, each acknowledged, over one connection.
func publishRange(t *testing.T, addr, id, topic, prefix string, from, to int) {
	t.Helper()
	c := mqttIn(t, addr, id, true)
	for i := from; i < to; i++ {
		c.publish(t, topic+"/"+strconv.Itoa(i), 1, false, prefix+strconv.Itoa(i))
	}
	c.Disconnect(50)
}

// TestMQTTBridgeQoS1NothingLost: QoS 1 streams through a bridge both ways
// while the remote broker is killed (-9) and restarted, and again while
// the edge itself is: every message arrives (duplicates allowed). Out: a
// message is acknowledged in the edge's durable queue only after the
// cloud's PUBACK; in: the cloud keeps the bridge's persistent session
// (cleansession false) and a message is PUBACKed only once the edge
// stored it.
func TestMQTTBridgeQoS1NothingLost(t *testing.T) {
	cloud := startBridgeNode(t)
	edge := startBridgeNode(t)
	sink := newCollector(t, cloud.mqtt, "cloud-sink", "up/#")
	down := newCollector(t, edge.mqtt, "edge-sink", "local/down/#")
	edge.api.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/loss", map[string]any{"value": map[string]any{
		"address": cloud.mqtt, "remote_username": "guest", "remote_password": "guest", "remote_clientid": "edge-loss",
		"cleansession": false, "restart_timeout": 1, "keepalive_interval": 5,
		"topic": []any{"data/# out 1 \"\" up/", "down/# in 1 local/ \"\""}}})
	waitBridge(t, edge.api, "loss", "running", 30*time.Second)

	// The cloud is killed while the edge publishes.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		publishRange(t, edge.mqtt, "edge-pub-1", "data", "o", 0, 300)
	}()
	publishRange(t, cloud.mqtt, "cloud-pub-1", "down", "i", 0, 100)
	eventually(t, 30*time.Second, "the cloud to receive some", func() bool { return len(sink.missing("o", 300)) < 280 })
	if err := cloud.p.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := cloud.p.Restart(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	publishRange(t, cloud.mqtt, "cloud-pub-2", "down", "i", 100, 200)
	waitAll(t, "every message across the cloud's kill", sink, "o", 300, down, "i", 200)

	// The edge is killed with messages in its bridge queue (the cloud is
	// down meanwhile, so none has left), and while the cloud holds
	// messages for the bridge's session.
	if err := cloud.p.Kill(); err != nil {
		t.Fatal(err)
	}
	publishRange(t, edge.mqtt, "edge-pub-2", "data", "o", 300, 600)
	if err := edge.p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cloud.p.Restart(); err != nil {
		t.Fatal(err)
	}
	publishRange(t, cloud.mqtt, "cloud-pub-3", "down", "i", 200, 300)
	if err := edge.p.Restart(); err != nil {
		t.Fatal(err)
	}
	publishRange(t, edge.mqtt, "edge-pub-3", "data", "o", 600, 650)
	publishRange(t, cloud.mqtt, "cloud-pub-4", "down", "i", 300, 350)
	waitAll(t, "every message across the edge's kill", sink, "o", 650, down, "i", 350)
}

// mosquittoBin finds mosquitto, installing Debian's package with the
// project's script when it is missing; the test skips only when it cannot
// be installed.
func mosquittoBin(t *testing.T) string {
	t.Helper()
	find := func() string {
		for _, p := range []string{"/usr/sbin/mosquitto", "/usr/bin/mosquitto"} {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	root, err := testbin.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := runCmd(filepath.Join(root, "test", "testdata", "install-mosquitto.sh"))
	if p := find(); p != "" {
		return p
	}
	t.Skipf("mosquitto is not installed and Debian's package could not be installed (test/testdata/install-mosquitto.sh: %v): %s", err, out)
	return ""
}

// mosquitto is a mosquitto process on a free loopback port with a config
// of its own in a temporary directory.
type mosquitto struct {
	t    *testing.T
	bin  string
	cfg  string
	addr string
	cmd  *exec.Cmd
}

// startMosquitto starts mosquitto; persist keeps its sessions and queued
// messages in its directory across a (graceful) restart; extra are more
// lines of its configuration.
func startMosquitto(t *testing.T, persist bool, extra ...string) *mosquitto {
	t.Helper()
	m := &mosquitto{t: t, bin: mosquittoBin(t), addr: freeAddr(t)}
	_, port, _ := strings.Cut(m.addr, ":")
	dir := t.TempDir()
	m.cfg = filepath.Join(dir, "mosquitto.conf")
	conf := "listener " + port + " 127.0.0.1\nallow_anonymous true\nlog_dest file " + filepath.Join(dir, "mosquitto.log") + "\n"
	if u, err := user.Current(); err == nil {
		// Started as root, mosquitto runs as user "mosquitto", who cannot
		// write in this directory: it keeps the test's user.
		conf += "user " + u.Username + "\n"
	}
	if persist {
		conf += "persistence true\npersistence_location " + dir + "/\n"
	} else {
		conf += "persistence false\n"
	}
	for _, l := range extra {
		conf += l + "\n"
	}
	if err := os.WriteFile(m.cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	m.start()
	t.Cleanup(func() {
		if m.cmd != nil {
			_ = m.cmd.Process.Kill()
			_ = m.cmd.Wait()
		}
	})
	return m
}

func (m *mosquitto) start() {
	m.t.Helper()
	m.cmd = exec.Command(m.bin, "-c", m.cfg)
	if err := m.cmd.Start(); err != nil {
		m.t.Fatalf("start mosquitto: %v", err)
	}
	eventually(m.t, 10*time.Second, "mosquitto to listen", func() bool { return canDial(m.addr) })
}

// restart stops mosquitto (SIGTERM: it saves its sessions) and starts it
// again on the same port.
func (m *mosquitto) restart() {
	m.t.Helper()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	_ = m.cmd.Wait()
	m.start()
}

// TestMQTTBridgeMosquitto: a Trident edge bridges to Mosquitto (from
// Debian's package) both ways, over MQTT 3.1.1 and 5.
func TestMQTTBridgeMosquitto(t *testing.T) {
	mosq := startMosquitto(t, false).addr
	edge := startBridgeNode(t)
	for _, ver := range []string{"mqttv311", "mqttv50"} {
		name := "mosq-" + ver
		edge.api.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/"+name, map[string]any{"value": map[string]any{
			"address": mosq, "remote_clientid": "trident-" + ver, "bridge_protocol_version": ver, "restart_timeout": 1,
			"topic": []any{"tele/# out 1 edge/ fleet/" + ver + "/", "ctl/# in 1 edge/ fleet/" + ver + "/"}}})
		waitBridge(t, edge.api, name, "running", 30*time.Second)
		m := dial3(t, "tcp://"+mosq, "mosq-sub-"+ver, true)
		m.subscribe(t, "fleet/"+ver+"/tele/#", 1)
		e := mqttIn(t, edge.mqtt, "edge-sub-"+ver, true)
		e.subscribe(t, "edge/ctl/#", 1)
		mqttIn(t, edge.mqtt, "edge-pub-"+ver, true).publish(t, "edge/tele/engine", 1, false, "rpm=900")
		if got := recv3(t, m, 10*time.Second); got.topic != "fleet/"+ver+"/tele/engine" || got.payload != "rpm=900" || got.qos != 1 {
			t.Fatalf("%s out: mosquitto got %+v", ver, got)
		}
		dial3(t, "tcp://"+mosq, "mosq-pub-"+ver, true).publish(t, "fleet/"+ver+"/ctl/stop", 1, false, "halt")
		if got := recv3(t, e, 10*time.Second); got.topic != "edge/ctl/stop" || got.payload != "halt" || got.qos != 1 {
			t.Fatalf("%s in: edge got %+v", ver, got)
		}
		var st map[string]any
		eventually(t, 10*time.Second, ver+": one in, one out counted", func() bool {
			st = bridgeState(edge.api, "/", name)
			return num(st["messages_in"]) == 1 && num(st["messages_out"]) == 1
		})
	}
}

// TestMQTTBridgePermissions: a bridge acts as the user who declared it,
// through the core's permission check: one declared by a user who may not
// read amq.topic is terminated with the refusal as its reason, and runs
// once the user may. Users without the policymaker or administrator tag
// cannot declare, read or delete bridges' definitions, nor restart them.
func TestMQTTBridgePermissions(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(201, "PUT", "/api/users/bridger", map[string]any{"password": "pw", "tags": "policymaker"})
	api.expect(201, "PUT", "/api/permissions/%2F/bridger", map[string]any{"configure": ".*", "write": ".*", "read": "^mqtt-bridge\\."})
	bridger := api.as("bridger", "pw")
	value := map[string]any{"address": b.mqttAddr(), "remote_username": "guest", "remote_password": "guest", "restart_timeout": 1,
		"topic": "secret/# out 1 \"\" copy/"}
	bridger.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/nosy", map[string]any{"value": value})
	st := waitBridge(t, api, "nosy", "terminated", 20*time.Second)
	if r, _ := st["reason"].(string); !strings.Contains(r, "ACCESS_REFUSED") || !strings.Contains(r, "amq.topic") || !strings.Contains(r, "secret/#") {
		t.Fatalf("reason %q: want the refusal to read amq.topic for secret/#", r)
	}
	if st["user"] != "bridger" {
		t.Fatalf("the bridge acts as %v, want bridger", st["user"])
	}
	api.expect(204, "PUT", "/api/permissions/%2F/bridger", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	waitBridge(t, api, "nosy", "running", 20*time.Second)

	// In: a user who may not write amq.topic. The message the remote
	// sent is not acknowledged to it while the local publish is refused:
	// the remote session keeps it, and it arrives once the user may.
	api.expect(201, "PUT", "/api/users/inbound", map[string]any{"password": "pw", "tags": "policymaker"})
	api.expect(201, "PUT", "/api/permissions/%2F/inbound", map[string]any{"configure": ".*", "write": "^mqtt-bridge\\.", "read": ".*"})
	api.expect(201, "PUT", "/api/users/far", map[string]any{"password": "farpw", "tags": ""})
	api.expect(201, "PUT", "/api/permissions/%2F/far", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	api.as("inbound", "pw").expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/inbound", map[string]any{"value": map[string]any{
		"address": b.mqttAddr(), "remote_username": "far", "remote_password": "farpw", "remote_clientid": "inbound-bridge",
		"cleansession": false, "restart_timeout": 1, "topic": "feed/# in 1 local/ \"\""}})
	waitBridge(t, api, "inbound", "running", 20*time.Second)
	local := dial3(t, "tcp://"+b.mqttAddr(), "local-feed", true, func(o *mqtt3.ClientOptions) { o.SetUsername("guest").SetPassword("guest") })
	local.subscribe(t, "local/feed/#", 1)
	dial3(t, "tcp://"+b.mqttAddr(), "far-pub", true, func(o *mqtt3.ClientOptions) { o.SetUsername("far").SetPassword("farpw") }).
		publish(t, "feed/1", 1, false, "first")
	st = waitBridge(t, api, "inbound", "terminated", 20*time.Second)
	if r, _ := st["reason"].(string); !strings.Contains(r, "ACCESS_REFUSED") || !strings.Contains(r, "write") {
		t.Fatalf("reason %q: want the refusal to write amq.topic", r)
	}
	local.none(t, 200*time.Millisecond)
	api.expect(204, "PUT", "/api/permissions/%2F/inbound", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	if m := recv3(t, local, 20*time.Second); m.topic != "local/feed/1" || m.payload != "first" {
		t.Fatalf("after the grant the edge got %+v, want local/feed/1 \"first\"", m)
	}

	for _, tags := range []string{"management", "monitoring"} {
		user := "br-" + tags
		api.expect(201, "PUT", "/api/users/"+user, map[string]any{"password": "pw", "tags": tags})
		api.expect(201, "PUT", "/api/permissions/%2F/"+user, map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
		as := api.as(user, "pw")
		for _, req := range []struct {
			method, path string
			body         any
		}{
			{"PUT", "/api/parameters/mqtt-bridge/%2F/mine", map[string]any{"value": value}},
			{"GET", "/api/parameters/mqtt-bridge/%2F/nosy", nil},
			{"GET", "/api/parameters/mqtt-bridge", nil},
			{"DELETE", "/api/parameters/mqtt-bridge/%2F/nosy", nil},
			{"DELETE", "/api/mqtt/bridges/%2F/nosy/restart", nil},
		} {
			if code, body := as.do(req.method, req.path, req.body); code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Fatalf("%s %s as a %s user: %d %s, want 401 or 403", req.method, req.path, tags, code, body)
			}
		}
	}
	if p := api.list("/api/parameters/mqtt-bridge"); len(p) != 2 {
		t.Fatalf("definitions %v, want inbound and nosy alone", p)
	}
	// A monitoring user sees the state.
	if st := bridgeState(api.as("br-monitoring", "pw"), "/", "nosy"); st == nil {
		t.Fatal("a monitoring user does not see the bridge's state")
	}
	// A definition that does not validate names its key.
	code, body := api.do("PUT", "/api/parameters/mqtt-bridge/%2F/bad", map[string]any{"value": map[string]any{
		"address": b.mqttAddr(), "topic": []any{"a/# sideways 1"}}})
	if code != 400 || !strings.Contains(string(body), "topic[0]") || !strings.Contains(string(body), "sideways") {
		t.Fatalf("bad direction: %d %s", code, body)
	}
}

// TestMQTTBridgeFromConfigFile: a bridge of the configuration file
// (mqtt.bridges) runs from boot, is shown as static, and the API can
// neither replace nor delete it.
func TestMQTTBridgeFromConfigFile(t *testing.T) {
	cloud := startBridgeNode(t)
	cfg := filepath.Join(t.TempDir(), "trident.yaml")
	if err := os.WriteFile(cfg, []byte(`mqtt:
  bridges:
    - name: boot
      address: `+cloud.mqtt+`
      remote_username: guest
      remote_password: guest
      remote_clientid: edge-boot
      restart_timeout: 1s
      topics:
        - "metrics/# out 1 site/ edge7/"
        - "orders/# in 1 site/ edge7/"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := mqttIn(t, cloud.mqtt, "boot-sub", true)
	sub.subscribe(t, "edge7/#", 1)
	edge := startBridgeNode(t, "--config", cfg)
	st := waitBridge(t, edge.api, "boot", "running", 30*time.Second)
	if st["type"] != "static" || st["user"] != "guest" {
		t.Fatalf("status %v, want a static bridge acting as guest", st)
	}
	mqttIn(t, edge.mqtt, "boot-pub", true).publish(t, "site/metrics/cpu", 1, false, "42")
	if m := recv3(t, sub, 10*time.Second); m.topic != "edge7/metrics/cpu" || m.payload != "42" {
		t.Fatalf("cloud got %+v", m)
	}
	es := mqttIn(t, edge.mqtt, "boot-orders", true)
	es.subscribe(t, "site/orders/#", 1)
	mqttIn(t, cloud.mqtt, "boot-cloud-pub", true).publish(t, "edge7/orders/1", 1, false, "ship")
	if m := recv3(t, es, 10*time.Second); m.topic != "site/orders/1" || m.payload != "ship" {
		t.Fatalf("edge got %+v", m)
	}
	edge.api.expect(400, "DELETE", "/api/parameters/mqtt-bridge/%2F/boot", nil)
	edge.api.expect(400, "PUT", "/api/parameters/mqtt-bridge/%2F/boot", map[string]any{"value": map[string]any{
		"address": cloud.mqtt, "topic": "x out"}})
	// Still there after a restart (from the file, not the store).
	if err := edge.p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitBridge(t, edge.api, "boot", "running", 30*time.Second)
}

// runCmd runs a program and returns its combined output.
func runCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func canDial(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestMQTTBridgeTLS: a bridge to a TLS listener verifies the remote's
// certificate against bridge_cafile and forwards over it; without that CA
// (the system's roots) the connection fails and the bridge says so
// without the details (a bridge is no port scanner).
func TestMQTTBridgeTLS(t *testing.T) {
	p := newPKI(t)
	cloud := tlsBroker(t, p)
	_, port, _ := net.SplitHostPort(cloud.n.MQTTTLSAddr().String())
	edge, base := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/tls", map[string]any{"value": map[string]any{
		"address": "localhost:" + port, "bridge_cafile": p.caFile, "remote_username": "guest", "remote_password": "guest",
		"restart_timeout": 1, "topic": "secure/# out 1"}})
	api.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/untrusted", map[string]any{"value": map[string]any{
		"address": "localhost:" + port, "bridge_tls": true, "remote_username": "guest", "remote_password": "guest",
		"restart_timeout": 1, "topic": "other/# out 1"}})
	st := waitBridge(t, api, "tls", "running", 20*time.Second)
	if st["tls"] != true {
		t.Fatalf("status %v", st)
	}
	sub := dial3(t, "ssl://"+cloud.n.MQTTTLSAddr().String(), "tls-sub", true, func(o *mqtt3.ClientOptions) {
		o.SetTLSConfig(p.client()).SetUsername("guest").SetPassword("guest")
	})
	sub.subscribe(t, "secure/#", 1)
	dial3(t, "tcp://"+edge.mqttAddr(), "tls-pub", true, func(o *mqtt3.ClientOptions) { o.SetUsername("guest").SetPassword("guest") }).
		publish(t, "secure/door", 1, false, "locked")
	if m := recv3(t, sub, 10*time.Second); m.topic != "secure/door" || m.payload != "locked" {
		t.Fatalf("got %+v", m)
	}
	st = waitBridge(t, api, "untrusted", "terminated", 20*time.Second)
	if st["reason"] != "remote: connection failed" {
		t.Fatalf("untrusted remote: reason %v", st["reason"])
	}
}

// TestMQTTBridgeReplaced: a bridge replaced through the API runs the new
// definition: its out queue keeps the new rules' bindings only, and a
// bridge left without out rules loses its queue.
func TestMQTTBridgeReplaced(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	put := func(code int, topics ...any) {
		api.expect(code, "PUT", "/api/parameters/mqtt-bridge/%2F/swap", map[string]any{"value": map[string]any{
			"address": b.mqttAddr(), "remote_username": "guest", "remote_password": "guest", "restart_timeout": 1, "topic": topics}})
	}
	keys := func() []string {
		var out []string
		for _, bd := range api.list("/api/queues/%2F/mqtt-bridge.swap/bindings") {
			if bd["source"] == "amq.topic" {
				out = append(out, bd["routing_key"].(string))
			}
		}
		return out
	}
	put(201, "a/# out 1 \"\" copy/", "keep/+ out 0 \"\" copy/")
	waitBridge(t, api, "swap", "running", 20*time.Second)
	if k := strings.Join(keys(), " "); k != "a.# keep.*" && k != "keep.* a.#" {
		t.Fatalf("bindings %q", k)
	}
	put(204, "b/# out 1 \"\" copy/", "keep/+ out 0 \"\" copy/")
	eventually(t, 20*time.Second, "the replaced rule's binding gone", func() bool {
		k := strings.Join(keys(), " ")
		return k == "b.# keep.*" || k == "keep.* b.#"
	})
	sub := dial3(t, "tcp://"+b.mqttAddr(), "swap-sub", true, func(o *mqtt3.ClientOptions) { o.SetUsername("guest").SetPassword("guest") })
	sub.subscribe(t, "copy/#", 1)
	pub := dial3(t, "tcp://"+b.mqttAddr(), "swap-pub", true, func(o *mqtt3.ClientOptions) { o.SetUsername("guest").SetPassword("guest") })
	pub.publish(t, "b/1", 1, false, "new rule")
	if m := recv3(t, sub, 10*time.Second); m.topic != "copy/b/1" {
		t.Fatalf("got %+v", m)
	}
	put(204, "c/# in 1 local/ \"\"")
	eventually(t, 20*time.Second, "the out queue deleted", func() bool {
		code, _ := api.do("GET", "/api/queues/%2F/mqtt-bridge.swap", nil)
		return code == 404
	})
}

// TestMQTTBridgeConfigErrors: a bridge of the configuration file that does
// not validate stops the start, named by its key path.
func TestMQTTBridgeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		b    conf.Bridge
		want string
	}{
		{conf.Bridge{Name: "x", Address: "h:1883", Topics: []string{"ok/# out", "a/# sideways 1"}}, "conf: mqtt.bridges[0].topics[1]: direction 'sideways'"},
		{conf.Bridge{Name: "x", Address: "h:1883", Topics: []string{"a"}, BridgeProtocolVersion: "v7"}, "conf: mqtt.bridges[0].bridge_protocol_version"},
		{conf.Bridge{Name: "x", Address: "h:notaport", Topics: []string{"a"}}, "conf: mqtt.bridges[0].address"},
	} {
		cfg := conf.Default()
		cfg.DataDir = t.TempDir()
		cfg.AMQP.Listen = "127.0.0.1:0"
		cfg.MQTT.Listen, cfg.MQTT.WSListen, cfg.STOMP.Listen, cfg.STOMP.WSListen = "", "", "", ""
		cfg.Stream.Listen, cfg.Stream.TLSListen, cfg.HTTP.Listen, cfg.Prometheus.Listen = "", "", "", ""
		cfg.MQTT.Bridges = []conf.Bridge{tc.b}
		n, err := node.Start(cfg, nil)
		if err == nil {
			_ = n.Close(context.Background())
			t.Fatalf("%+v: started", tc.b)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.b, err, tc.want)
		}
	}
}

// TestMQTTBridgeDefinitions: the definitions export (administrators only)
// carries the API's bridges with their password, as it does shovels, and
// an import declares them on another broker.
func TestMQTTBridgeDefinitions(t *testing.T) {
	_, base := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/exported", map[string]any{"value": map[string]any{
		"address": "127.0.0.1:1", "remote_username": "u", "remote_password": "secret", "topic": "x/# both 1"}})
	all := api.list("/api/parameters")
	if len(all) != 1 || all[0]["component"] != "mqtt-bridge" || all[0]["value"].(map[string]any)["remote_password"] != "***" {
		t.Fatalf("/api/parameters: %v", all)
	}
	data := api.expect(200, "GET", "/api/definitions", nil)
	var d struct{ Parameters []map[string]any }
	if err := jsonUnmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range d.Parameters {
		if p["component"] == "mqtt-bridge" && p["name"] == "exported" {
			found = p["value"].(map[string]any)["remote_password"] == "secret"
		}
	}
	if !found {
		t.Fatalf("export lacks the bridge with its password: %s", data)
	}
	_, base2 := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	api2 := apiClient{t: t, base: base2, user: "guest", pass: "guest"}
	api2.expect(204, "POST", "/api/definitions", string(data))
	var p map[string]any
	api2.getJSON("/api/parameters/mqtt-bridge/%2F/exported", &p)
	if v, _ := p["value"].(map[string]any); v["address"] != "127.0.0.1:1" || v["topic"] != "x/# both 1" {
		t.Fatalf("imported %v", p)
	}
	if bridgeState(api2, "/", "exported") == nil {
		t.Fatal("the imported bridge has no state")
	}
}

// TestMQTTBridgeVHostDeleted: a vhost's bridges go with it, as its shovels.
func TestMQTTBridgeVHostDeleted(t *testing.T) {
	_, base := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(201, "PUT", "/api/vhosts/site", map[string]any{})
	api.do("PUT", "/api/permissions/site/guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	api.expect(201, "PUT", "/api/parameters/mqtt-bridge/site/b", map[string]any{"value": map[string]any{
		"address": "127.0.0.1:1", "topic": "x/# out 1"}})
	if st := bridgeState(api, "site", "b"); st == nil || st["remote_clientid"] == "" {
		t.Fatalf("state %v", st)
	}
	api.expect(204, "DELETE", "/api/vhosts/site", nil)
	if p := api.list("/api/parameters/mqtt-bridge"); len(p) != 0 {
		t.Fatalf("left behind: %v", p)
	}
}

// TestMQTTBridgeMosquittoRestarts: QoS 1 through a bridge to Mosquitto
// loses nothing while Mosquitto restarts (its persistence keeps the
// bridge's session and the subscriber's) and while the edge is killed
// (-9) with messages queued for it on Mosquitto.
func TestMQTTBridgeMosquittoRestarts(t *testing.T) {
	mosq := startMosquitto(t, true)
	edge := startBridgeNode(t)
	sink := newCollector(t, mosq.addr, "mosq-sink", "up/#")
	down := newCollector(t, edge.mqtt, "edge-sink", "local/down/#")
	edge.api.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/mosq", map[string]any{"value": map[string]any{
		"address": mosq.addr, "remote_clientid": "edge-mosq", "cleansession": false, "restart_timeout": 1,
		"topic": []any{"data/# out 1 \"\" up/", "down/# in 1 local/ \"\""}}})
	waitBridge(t, edge.api, "mosq", "running", 30*time.Second)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		publishRange(t, edge.mqtt, "edge-pub-1", "data", "o", 0, 300)
	}()
	publishRange(t, mosq.addr, "mosq-pub-1", "down", "i", 0, 100)
	eventually(t, 30*time.Second, "mosquitto to receive some", func() bool { return len(sink.missing("o", 300)) < 280 })
	mosq.restart()
	wg.Wait()
	publishRange(t, mosq.addr, "mosq-pub-2", "down", "i", 100, 200)
	waitAll(t, "across mosquitto's restart", sink, "o", 300, down, "i", 200)

	if err := edge.p.Kill(); err != nil {
		t.Fatal(err)
	}
	publishRange(t, mosq.addr, "mosq-pub-3", "down", "i", 200, 300)
	if err := edge.p.Restart(); err != nil {
		t.Fatal(err)
	}
	publishRange(t, edge.mqtt, "edge-pub-2", "data", "o", 300, 350)
	waitAll(t, "across the edge's kill", sink, "o", 350, down, "i", 300)
}

// TestMQTTBridgeBacklogOnReconnect: a bridge coming back to a persistent
// remote session that holds more messages than its window (bridge
// inflight, 256) gets them all. Mosquitto, with no bound on what it
// queues (max_queued_messages 0), sends a returning session its backlog
// right after CONNACK, ahead of the SUBACK of the bridge's subscription:
// a bridge that waited for that SUBACK before taking messages in never
// saw it (its client's router, which delivers in order, blocked on the
// full hand-off) and stayed "starting" with the backlog on the remote.
func TestMQTTBridgeBacklogOnReconnect(t *testing.T) {
	mosq := startMosquitto(t, true, "max_queued_messages 0")
	edge := startBridgeNode(t)
	down := newCollector(t, edge.mqtt, "edge-backlog-sink", "local/down/#")
	edge.api.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/backlog", map[string]any{"value": map[string]any{
		"address": mosq.addr, "remote_clientid": "edge-backlog", "cleansession": false, "restart_timeout": 1,
		"topic": []any{"down/# in 1 local/ \"\""}}})
	waitBridge(t, edge.api, "backlog", "running", 30*time.Second)
	publishRange(t, mosq.addr, "mosq-backlog-1", "down", "i", 0, 10)
	waitAll(t, "before the edge's kill", down, "i", 10, down, "i", 10)

	// The edge is killed while the messages flow: some in flight to it,
	// most queued on Mosquitto for its session.
	// Published pipelined (the whole range in flight at once), so that
	// Mosquitto holds most of it for the bridge's session at the kill.
	pub := mqttIn(t, mosq.addr, "mosq-backlog-2", true)
	var toks []mqtt3.Token
	for i := 10; i < 20000; i++ {
		toks = append(toks, pub.Publish("down/"+strconv.Itoa(i), 1, false, "i"+strconv.Itoa(i)))
	}
	eventually(t, 30*time.Second, "the edge to receive some", func() bool { return len(down.missing("i", 20000)) < 19000 })
	if err := edge.p.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("publish to Mosquitto: %v", tok.Error())
		}
	}
	pub.Disconnect(50)
	if err := edge.p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitAll(t, "the backlog after the edge's restart", down, "i", 20000, down, "i", 20000)
	waitBridge(t, edge.api, "backlog", "running", 30*time.Second)
}
