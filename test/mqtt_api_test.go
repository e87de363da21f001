package test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/trident-broker/trident/conf"
)

// Issue 40 item 4: the MQTT fleet API (/api/mqtt/...), with real paho
// clients of both protocol versions.

// mqttAPIBroker starts a node with the management API and MQTT on TCP,
// and users: alice and bob (management, full permissions on "/"), mon
// (monitoring), nobody (management, no permissions).
func mqttAPIBroker(t *testing.T) (*broker, apiClient) {
	t.Helper()
	b, base := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	for _, u := range []struct{ name, tags string }{{"alice", "management"}, {"bob", "management"},
		{"mon", "monitoring"}, {"nobody", "management"}} {
		api.expect(http.StatusCreated, "PUT", "/api/users/"+u.name, map[string]any{"password": "pw", "tags": u.tags})
		if u.name != "nobody" {
			api.expect(http.StatusCreated, "PUT", "/api/permissions/%2F/"+u.name, map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
		}
	}
	return b, api
}

func mqttAs3(user string) func(*mqttOpts) {
	return func(o *mqttOpts) { o.SetUsername(user).SetPassword("pw") }
}

func mqttConnect5(id, user string, clean bool, expiry uint32, keepalive uint16) *paho.Connect {
	return &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: keepalive, Username: user, UsernameFlag: true,
		Password: []byte("pw"), PasswordFlag: true, Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(expiry)}}
}

// byID indexes a list by client_id.
func mqttByID(l []map[string]any) map[string]map[string]any {
	m := map[string]map[string]any{}
	for _, e := range l {
		m[e["client_id"].(string)] = e
	}
	return m
}

func mqttWant(t *testing.T, what string, m map[string]any, key string, want any) {
	t.Helper()
	got, ok := m[key]
	if !ok {
		t.Errorf("%s: no field %q in %v", what, key, m)
		return
	}
	if f, isNum := want.(int); isNum {
		want = float64(f)
	}
	if got != want {
		t.Errorf("%s: %s = %v (%T), want %v", what, key, got, got, want)
	}
}

func TestMQTTAPIClientsAndSessions(t *testing.T) {
	b, api := mqttAPIBroker(t)
	addr := b.mqttAddr()
	before := time.Now().Add(-time.Second)

	// A 3.1.1 client with a persistent session and two subscriptions.
	c3 := dial3(t, "tcp://"+addr, "c3", false, mqttAs3("alice"), func(o *mqttOpts) { o.SetKeepAlive(17 * time.Second) })
	c3.subscribe(t, "a/+/c", 1)
	c3.subscribe(t, "x/#", 0)
	// An MQTT 5 client, clean start, expiry 600, with MQTT 5 options.
	c5, _ := dial5(t, addr, mqttConnect5("c5", "bob", true, 600, 25))
	c5.subscribeWith(t, &paho.SubscribeProperties{SubscriptionIdentifier: intp(7)},
		paho.SubscribeOptions{Topic: "v5/#", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 1})
	// An MQTT 5 persistent session that goes offline with 3 QoS 1
	// messages queued, and a 3.1.1 one with 2.
	off5, _ := dial5(t, addr, mqttConnect5("off5", "alice", true, 3600, 30))
	off5.subscribe(t, paho.SubscribeOptions{Topic: "q5/#", QoS: 1})
	off3 := dial3(t, "tcp://"+addr, "off3", false, mqttAs3("alice"))
	off3.subscribe(t, "q3/#", 1)
	offBefore := time.Now()
	if err := off5.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	off3.Disconnect(50)
	pub := dial3(t, "tcp://"+addr, "pub", true, mqttAs3("bob"))
	for i := 0; i < 3; i++ {
		pub.publish(t, "q5/x", 1, false, "m")
	}
	for i := 0; i < 2; i++ {
		pub.publish(t, "q3/x", 1, false, "m")
	}
	var sessions map[string]map[string]any
	waitUntil(t, "queued counts", func() bool {
		sessions = mqttByID(api.list("/api/mqtt/sessions"))
		return num(sessions["off5"]["queued"]) == 3 && num(sessions["off3"]["queued"]) == 2
	})
	offAfter := time.Now()

	// Clients: every field.
	clients := mqttByID(api.list("/api/mqtt/clients"))
	if len(clients) != 3 { // c3, c5, pub
		t.Fatalf("clients: %v", clients)
	}
	k3, k5 := clients["c3"], clients["c5"]
	for k, v := range map[string]any{"user": "alice", "vhost": "/", "protocol_version": "3.1.1", "protocol": "MQTT 3.1.1",
		"transport": "tcp", "keepalive": 17, "clean_session": false, "session_expiry_interval": float64(0xFFFFFFFF),
		"session_expiry_never": true, "persistent": true, "connected": true, "peer_host": "127.0.0.1",
		"subscriptions": 2, "inflight": 0, "queued": 0, "unacked": 0, "queue": "mqtt-subscription-c3qos1"} {
		mqttWant(t, "client c3", k3, k, v)
	}
	for k, v := range map[string]any{"user": "bob", "protocol_version": "5", "protocol": "MQTT 5", "keepalive": 25,
		"clean_session": true, "session_expiry_interval": 600, "session_expiry_never": false, "subscriptions": 1} {
		mqttWant(t, "client c5", k5, k, v)
	}
	if p := num(k3["peer_port"]); p <= 0 || p > 65535 {
		t.Errorf("c3 peer_port %v", k3["peer_port"])
	}
	if at := int64(num(k3["connected_at"])); at < before.UnixMilli() || at > time.Now().UnixMilli() {
		t.Errorf("c3 connected_at %d not in [%d, now]", at, before.UnixMilli())
	}
	if n, _ := k3["name"].(string); !strings.Contains(n, "->") {
		t.Errorf("c3 name %q is not its connection's", n)
	} else {
		api.expect(http.StatusOK, "GET", "/api/connections/"+url.PathEscape(n), nil)
	}
	if _, ok := k3["subscription_list"]; ok {
		t.Error("the client list carries subscription_list")
	}
	// Paging and filtering as the other lists.
	var page map[string]any
	api.getJSON("/api/mqtt/clients?page=1&page_size=2&name=c", &page)
	mqttWant(t, "clients page", page, "item_count", 2)
	mqttWant(t, "clients page", page, "filtered_count", 2) // c3, c5 (not pub)
	mqttWant(t, "clients page", page, "total_count", 3)
	if l := api.list("/api/mqtt/clients/%2F?name=c5"); len(l) != 1 || l[0]["client_id"] != "c5" {
		t.Errorf("clients of / named c5: %v", l)
	}

	// One client: its subscriptions with MQTT 5 options.
	d5 := api.object("/api/mqtt/clients/%2F/c5")
	subs, _ := d5["subscription_list"].([]any)
	if len(subs) != 1 {
		t.Fatalf("c5 subscription_list %v", d5["subscription_list"])
	}
	s5 := subs[0].(map[string]any)
	for k, v := range map[string]any{"topic_filter": "v5/#", "qos": 2, "no_local": true, "retain_as_published": true,
		"retain_handling": 1, "subscription_identifier": 7} {
		mqttWant(t, "c5 subscription", s5, k, v)
	}
	d3 := api.object("/api/mqtt/clients/%2F/c3")
	subs3, _ := d3["subscription_list"].([]any)
	filters := map[string]float64{}
	for _, s := range subs3 {
		m := s.(map[string]any)
		filters[m["topic_filter"].(string)] = num(m["qos"])
		mqttWant(t, "c3 subscription", m, "no_local", false)
	}
	if len(filters) != 2 || filters["a/+/c"] != 1 || filters["x/#"] != 0 {
		t.Errorf("c3 subscriptions %v", filters)
	}
	api.expect(http.StatusNotFound, "GET", "/api/mqtt/clients/%2F/off5", nil) // not connected

	// Sessions: the offline ones with their queued counts and expiry.
	s5off, s3off := sessions["off5"], sessions["off3"]
	for k, v := range map[string]any{"connected": false, "persistent": true, "session_expiry_interval": 3600,
		"user": "alice", "queue": "mqtt-subscription-off5qos1", "subscriptions": 1, "vhost": "/"} {
		mqttWant(t, "session off5", s5off, k, v)
	}
	exp := int64(num(s5off["expires_at"]))
	if lo, hi := offBefore.Add(time.Hour).UnixMilli()-1000, offAfter.Add(time.Hour).UnixMilli()+1000; exp < lo || exp > hi {
		t.Errorf("off5 expires_at %d not in [%d, %d]", exp, lo, hi)
	}
	mqttWant(t, "session off3", s3off, "session_expiry_never", true)
	mqttWant(t, "session off3", s3off, "expires_at", nil)
	mqttWant(t, "session c3", sessions["c3"], "connected", true)
	mqttWant(t, "session c5", sessions["c5"], "persistent", true) // expiry 600
	if _, ok := sessions["pub"]; !ok {
		t.Error("the connected clean session pub is not listed")
	}
	one := api.object("/api/mqtt/sessions/%2F/off5")
	if l, _ := one["subscription_list"].([]any); len(l) != 1 || l[0].(map[string]any)["topic_filter"] != "q5/#" {
		t.Errorf("off5 subscription_list %v", one["subscription_list"])
	}

	// Who sees what: alice her own, mon all, nobody nothing.
	alice, bob, mon, nobody := api.as("alice", "pw"), api.as("bob", "pw"), api.as("mon", "pw"), api.as("nobody", "pw")
	if got := mqttByID(alice.list("/api/mqtt/clients")); len(got) != 1 || got["c3"] == nil {
		t.Errorf("alice sees clients %v", got)
	}
	if got := mqttByID(alice.list("/api/mqtt/sessions")); len(got) != 3 || got["off5"] == nil || got["c5"] != nil {
		t.Errorf("alice sees sessions %v", got)
	}
	if got := mon.list("/api/mqtt/clients"); len(got) != 3 {
		t.Errorf("mon sees %d clients", len(got))
	}
	if got := nobody.list("/api/mqtt/sessions"); len(got) != 0 {
		t.Errorf("nobody sees sessions %v", got)
	}
	bob.expect(http.StatusNotFound, "GET", "/api/mqtt/clients/%2F/c3", nil)
	bob.expect(http.StatusNotFound, "GET", "/api/mqtt/sessions/%2F/off5", nil)
	nobody.expect(http.StatusUnauthorized, "GET", "/api/mqtt/clients/%2F", nil)

	// Removing sessions: not another user's, not a monitoring user's,
	// not a connected one; the owner's own offline one.
	bob.expect(http.StatusNotFound, "DELETE", "/api/mqtt/sessions/%2F/off5", nil)
	mon.expect(http.StatusUnauthorized, "DELETE", "/api/mqtt/sessions/%2F/off5", nil)
	api.expect(http.StatusConflict, "DELETE", "/api/mqtt/sessions/%2F/c3", nil)
	alice.expect(http.StatusNoContent, "DELETE", "/api/mqtt/sessions/%2F/off5", nil)
	api.expect(http.StatusNotFound, "GET", "/api/mqtt/sessions/%2F/off5", nil)
	api.expect(http.StatusNotFound, "GET", "/api/queues/%2F/mqtt-subscription-off5qos1", nil)
	api.expect(http.StatusNoContent, "DELETE", "/api/mqtt/sessions/%2F/off3", nil)
	api.expect(http.StatusNotFound, "DELETE", "/api/mqtt/sessions/%2F/off3", nil)
	// The client that comes back finds no session and no messages.
	back, ack := dial5(t, addr, mqttConnect5("off5", "alice", false, 3600, 30))
	if ack.SessionPresent {
		t.Error("off5 resumed a removed session")
	}
	back.none(t, 300*time.Millisecond)

	// Disconnecting: MQTT 5 gets DISCONNECT 0x98.
	bob.expect(http.StatusNotFound, "DELETE", "/api/mqtt/clients/%2F/c3", nil)
	mon.expect(http.StatusUnauthorized, "DELETE", "/api/mqtt/clients/%2F/c3", nil)
	bob.expect(http.StatusNoContent, "DELETE", "/api/mqtt/clients/%2F/c5", nil)
	select {
	case d := <-c5.disc:
		if d.ReasonCode != 0x98 {
			t.Errorf("c5 DISCONNECT reason %#x, want 0x98", d.ReasonCode)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("c5 got no DISCONNECT")
	}
	api.expect(http.StatusNoContent, "DELETE", "/api/mqtt/clients/%2F/c3", nil)
	waitUntil(t, "c3 disconnected", func() bool { return !c3.IsConnectionOpen() })
	waitUntil(t, "the clients list without c3 and c5", func() bool {
		l := mqttByID(api.list("/api/mqtt/clients"))
		return l["c3"] == nil && l["c5"] == nil
	})
	// c3's persistent session stays, offline.
	mqttWant(t, "session c3", api.object("/api/mqtt/sessions/%2F/c3"), "connected", false)
}

func TestMQTTAPIRetained(t *testing.T) {
	b, api := mqttAPIBroker(t)
	addr := b.mqttAddr()
	before := time.Now().Add(-time.Second)
	pub := dial3(t, "tcp://"+addr, "rpub", true, mqttAs3("alice"))
	pub.publish(t, "r/1", 1, true, "hello")
	bin := string([]byte{0xff, 0xfe, 0x00, 0x01})
	pub.publish(t, "r/2", 0, true, bin)
	pub.publish(t, "r/deep/3", 1, true, strings.Repeat("é", 500)) // 1000 bytes
	pub.publish(t, "other/4", 1, true, "o")                       // QoS 1: stored when publish returns
	p5, _ := dial5(t, addr, mqttConnect5("rpub5", "alice", true, 0, 30))
	p5.publish(t, &paho.Publish{Topic: "r5", QoS: 1, Retain: true, Payload: []byte("{}"),
		Properties: &paho.PublishProperties{ContentType: "application/json", MessageExpiry: u32(3600)}})
	after := time.Now().Add(time.Second)

	type item = map[string]any
	get := func(c apiClient, q string) (map[string]any, []item) {
		t.Helper()
		var page map[string]any
		c.getJSON("/api/mqtt/retained?"+q, &page)
		var items []item
		for _, i := range page["items"].([]any) {
			items = append(items, i.(item))
		}
		return page, items
	}
	page, items := get(api, "vhost=%2F&topic="+url.QueryEscape("r/#"))
	if len(items) != 3 {
		t.Fatalf("r/#: %v", items)
	}
	mqttWant(t, "r/# page", page, "filtered_count", 3)
	for i, topic := range []string{"r/1", "r/2", "r/deep/3"} {
		mqttWant(t, "retained", items[i], "topic", topic)
		mqttWant(t, "retained", items[i], "vhost", "/")
		if at := int64(num(items[i]["stored_at"])); at < before.UnixMilli() || at > after.UnixMilli() {
			t.Errorf("%s stored_at %d not in [%d, %d]", topic, at, before.UnixMilli(), after.UnixMilli())
		}
		mqttWant(t, "retained", items[i], "expires_at", nil)
	}
	for k, v := range map[string]any{"qos": 1, "payload_bytes": 5, "payload": "hello", "payload_encoding": "string",
		"payload_truncated": false} {
		mqttWant(t, "r/1", items[0], k, v)
	}
	for k, v := range map[string]any{"qos": 0, "payload_bytes": 4, "payload": base64.StdEncoding.EncodeToString([]byte(bin)),
		"payload_encoding": "base64"} {
		mqttWant(t, "r/2", items[1], k, v)
	}
	// The preview is bounded, cut at a whole character.
	for k, v := range map[string]any{"payload_bytes": 1000, "payload": strings.Repeat("é", 128),
		"payload_encoding": "string", "payload_truncated": true} {
		mqttWant(t, "r/deep/3", items[2], k, v)
	}
	_, items = get(api, "vhost=%2F&topic=r/deep/3&preview=7")
	mqttWant(t, "r/deep/3 preview 7", items[0], "payload", strings.Repeat("é", 3))
	// MQTT 5 properties.
	_, items = get(api, "topic=r5")
	if len(items) != 1 {
		t.Fatalf("r5: %v", items)
	}
	mqttWant(t, "r5", items[0], "content_type", "application/json")
	if exp := int64(num(items[0]["expires_at"])); exp < before.Add(time.Hour).UnixMilli()-1000 || exp > after.Add(time.Hour).UnixMilli()+1000 {
		t.Errorf("r5 expires_at %d", exp)
	}
	// Wildcards, all vhosts, paging and the cursor.
	if _, items = get(api, "topic="+url.QueryEscape("r/+")); len(items) != 2 {
		t.Errorf("r/+: %v", items)
	}
	page, items = get(api, "page=2&page_size=2")
	mqttWant(t, "page 2", page, "filtered_count", 5)
	mqttWant(t, "page 2", page, "page_count", 3)
	if len(items) != 2 || items[0]["topic"] != "r/2" || items[1]["topic"] != "r/deep/3" {
		t.Errorf("page 2 of all: %v", items)
	}
	next, _ := page["next"].(map[string]any)
	if next == nil || next["after"] != "r/deep/3" || next["after_vhost"] != "/" {
		t.Fatalf("page 2 next %v", page["next"])
	}
	page, items = get(api, "page_size=2&after_vhost=%2F&after="+url.QueryEscape("r/deep/3"))
	if len(items) != 1 || items[0]["topic"] != "r5" || page["next"] != nil {
		t.Errorf("after r/deep/3: %v next %v", items, page["next"])
	}
	// Bounds.
	api.expect(http.StatusBadRequest, "GET", "/api/mqtt/retained?topic="+url.QueryEscape("a/#/b"), nil)
	api.expect(http.StatusBadRequest, "GET", "/api/mqtt/retained?page_size=501", nil)
	api.expect(http.StatusBadRequest, "GET", "/api/mqtt/retained?page=1000&page_size=500", nil)
	api.expect(http.StatusBadRequest, "GET", "/api/mqtt/retained?preview=100000", nil)
	api.expect(http.StatusNotFound, "GET", "/api/mqtt/retained?vhost=nope", nil)

	// Rights: reading needs the vhost; clearing needs write on the
	// exchange and the topic.
	nobody := api.as("nobody", "pw")
	nobody.expect(http.StatusUnauthorized, "GET", "/api/mqtt/retained?vhost=%2F", nil)
	if _, items = get(nobody, ""); len(items) != 0 {
		t.Errorf("nobody sees retained messages %v", items)
	}
	if _, items = get(api.as("mon", "pw"), "topic=r/1"); len(items) != 1 {
		t.Errorf("mon sees %v", items)
	}
	nobody.expect(http.StatusUnauthorized, "DELETE", "/api/mqtt/retained/%2F?topic=r/1", nil)
	api.expect(http.StatusCreated, "PUT", "/api/users/reader", map[string]any{"password": "pw", "tags": "management"})
	api.expect(http.StatusCreated, "PUT", "/api/permissions/%2F/reader", map[string]any{"configure": "", "write": "", "read": ".*"})
	api.as("reader", "pw").expect(http.StatusUnauthorized, "DELETE", "/api/mqtt/retained/%2F?topic=r/1", nil)
	api.expect(http.StatusCreated, "PUT", "/api/topic-permissions/%2F/bob", map[string]any{"exchange": "amq.topic", "write": "^other\\.", "read": ".*"})
	api.as("bob", "pw").expect(http.StatusUnauthorized, "DELETE", "/api/mqtt/retained/%2F?topic=r/1", nil)
	if _, items = get(api, "topic=r/1"); len(items) != 1 {
		t.Fatal("a refused clear cleared r/1")
	}
	api.as("bob", "pw").expect(http.StatusNoContent, "DELETE", "/api/mqtt/retained/%2F?topic=other/4", nil)

	// Clearing: the index, the store and a new subscriber agree.
	api.expect(http.StatusNoContent, "DELETE", "/api/mqtt/retained/%2F?topic=r/1", nil)
	api.expect(http.StatusNotFound, "DELETE", "/api/mqtt/retained/%2F?topic=r/1", nil)
	api.expect(http.StatusBadRequest, "DELETE", "/api/mqtt/retained/%2F?topic=r/%23", nil)
	api.expect(http.StatusBadRequest, "DELETE", "/api/mqtt/retained/%2F", nil)
	if _, items = get(api, ""); len(items) != 3 {
		t.Errorf("after clearing: %v", items)
	}
	sub := dial3(t, "tcp://"+addr, "rsub", true, mqttAs3("alice"))
	sub.subscribe(t, "r/#", 1)
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		got[sub.receive(t).topic] = true
	}
	sub.none(t, 300*time.Millisecond)
	if !got["r/2"] || !got["r/deep/3"] {
		t.Errorf("a new subscriber got %v", got)
	}
	// And after a restart, from the store.
	b.restart()
	api2 := apiClient{t: t, base: "http://" + b.n.HTTPAddr().String(), user: "guest", pass: "guest"}
	if _, items = get(api2, ""); len(items) != 3 || items[0]["topic"] != "r/2" {
		t.Errorf("after a restart: %v", items)
	}
}

func TestMQTTAPIRefusals(t *testing.T) {
	_, api := mqttAPIBroker(t)
	// Without a management tag, nothing.
	api.expect(http.StatusCreated, "PUT", "/api/users/plain", map[string]any{"password": "pw", "tags": ""})
	plain := api.as("plain", "pw")
	for _, p := range []string{"/api/mqtt/clients", "/api/mqtt/sessions", "/api/mqtt/retained"} {
		plain.expect(http.StatusUnauthorized, "GET", p, nil)
	}
	plain.expect(http.StatusUnauthorized, "DELETE", "/api/mqtt/sessions/%2F/x", nil)
	plain.expect(http.StatusUnauthorized, "DELETE", "/api/mqtt/retained/%2F?topic=x", nil)
	api.expect(http.StatusNotFound, "DELETE", "/api/mqtt/clients/%2F/none", nil)
	api.expect(http.StatusNotFound, "DELETE", "/api/mqtt/sessions/%2F/none", nil)
}

// TestMQTTAPIVersions: MQTT 3.1 and MQTT over WebSocket are named so.
func TestMQTTAPIVersions(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) {
		c.MQTT.Listen, c.MQTT.WSListen = "127.0.0.1:0", "127.0.0.1:0"
		anonMQTT(c)
	})
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	dial3(t, "tcp://"+b.mqttAddr(), "v31", true, func(o *mqttOpts) { o.SetProtocolVersion(3) })
	dial3(t, "ws://"+b.n.MQTTWSAddr().String()+"/ws", "ws311", true)
	cs := mqttByID(api.list("/api/mqtt/clients"))
	mqttWant(t, "v31", cs["v31"], "protocol_version", "3.1")
	mqttWant(t, "v31", cs["v31"], "protocol", "MQTT 3.1")
	mqttWant(t, "ws311", cs["ws311"], "protocol_version", "3.1.1")
	mqttWant(t, "ws311", cs["ws311"], "protocol", "Web MQTT 3.1.1")
	mqttWant(t, "ws311", cs["ws311"], "transport", "websocket")
}
