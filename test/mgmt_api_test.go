package test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Endpoints, field names and status codes, as RabbitMQ 3.10's management
// API answers them (checked against the anchor).

func TestMgmtQueuesExchangesBindings(t *testing.T) {
	_, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}

	a.expect(201, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 10}})
	a.expect(204, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 10}})
	data := a.expect(400, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": false})
	if e, r := errorBody(t, data); e != "bad_request" || !strings.Contains(r, "inequivalent arg 'durable'") {
		t.Errorf("inequivalent redeclare: %s", data)
	}
	q := a.object("/api/queues/%2F/q1")
	hasFields(t, "queue", q, "name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "node", "type", "state",
		"consumers", "messages", "messages_ready", "messages_unacknowledged", "messages_details", "message_stats",
		"consumer_details", "message_bytes")
	if q["name"] != "q1" || q["vhost"] != "/" || q["type"] != "classic" || num(q["arguments"].(map[string]any)["x-max-length"]) != 10 {
		t.Errorf("queue: %v", q)
	}
	a.expect(404, "GET", "/api/queues/%2F/nope", nil)
	a.expect(404, "GET", "/api/queues/novhost", nil)

	a.expect(201, "PUT", "/api/exchanges/%2F/x1", map[string]any{"type": "topic", "durable": true})
	a.expect(204, "PUT", "/api/exchanges/%2F/x1", map[string]any{"type": "topic", "durable": true})
	data = a.expect(400, "PUT", "/api/exchanges/%2F/x2", map[string]any{"type": "bogus"})
	if _, r := errorBody(t, data); r != "unknown exchange type 'bogus'" {
		t.Errorf("bogus type: %s", data)
	}
	x := a.object("/api/exchanges/%2F/x1")
	hasFields(t, "exchange", x, "name", "vhost", "type", "durable", "auto_delete", "internal", "arguments", "incoming", "outgoing")
	if d := a.object("/api/exchanges/%2F/amq.default"); d["name"] != "" || d["type"] != "direct" {
		t.Errorf("amq.default: %v", d)
	}

	// Bindings: create (201 + Location), list, get and delete by properties key.
	req, _ := http.NewRequest("POST", base+"/api/bindings/%2F/e/x1/q/q1", strings.NewReader(`{"routing_key":"a.#","arguments":{"k":"v"}}`))
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json") // the API takes JSON only (issue 38, F7)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 201 || !strings.HasPrefix(loc, "q1/a.%2523~") {
		t.Fatalf("create binding: %d, Location %q", resp.StatusCode, loc)
	}
	a.expect(201, "POST", "/api/bindings/%2F/e/x1/q/q1", map[string]any{"routing_key": "b"})
	bs := a.list("/api/bindings/%2F/e/x1/q/q1")
	if len(bs) != 2 {
		t.Fatalf("bindings x1->q1: %v", bs)
	}
	hasFields(t, "binding", bs[0], "source", "vhost", "destination", "destination_type", "routing_key", "arguments", "properties_key")
	all := a.list("/api/bindings/%2F")
	if len(all) != 3 || all[0]["source"] != "" || all[0]["routing_key"] != "q1" {
		t.Errorf("vhost bindings (with the default exchange's): %v", all)
	}
	b := a.object("/api/bindings/%2F/e/x1/q/q1/" + loc[len("q1/"):])
	if b["routing_key"] != "a.#" {
		t.Errorf("binding by props: %v", b)
	}
	a.expect(204, "DELETE", "/api/bindings/%2F/e/x1/q/q1/b", nil)
	a.expect(404, "DELETE", "/api/bindings/%2F/e/x1/q/q1/b", nil)
	a.expect(404, "POST", "/api/bindings/%2F/e/nox/q/q1", map[string]any{"routing_key": "k"})
	// Exchange to exchange.
	a.expect(201, "PUT", "/api/exchanges/%2F/x2", map[string]any{"type": "fanout"})
	a.expect(201, "POST", "/api/bindings/%2F/e/x1/e/x2", map[string]any{"routing_key": "z"})
	if l := a.list("/api/bindings/%2F/e/x1/e/x2"); len(l) != 1 || l[0]["destination_type"] != "exchange" {
		t.Errorf("e2e: %v", l)
	}
	if l := a.list("/api/exchanges/%2F/x2/bindings/destination"); len(l) != 1 {
		t.Errorf("x2 destination bindings: %v", l)
	}
	a.expect(204, "DELETE", "/api/bindings/%2F/e/x1/e/x2/z", nil)

	// Publish and get.
	var routed map[string]bool
	pub := func(x, rk, payload, enc string) bool {
		data := a.expect(200, "POST", "/api/exchanges/%2F/"+x+"/publish", map[string]any{"properties": map[string]any{"delivery_mode": 2, "headers": map[string]any{"h": 1}},
			"routing_key": rk, "payload": payload, "payload_encoding": enc})
		routed = nil
		if err := jsonUnmarshal(data, &routed); err != nil {
			t.Fatal(err)
		}
		return routed["routed"]
	}
	if !pub("x1", "a.b", "hello", "string") || pub("x1", "zz", "x", "string") || !pub("amq.default", "q1", "aGk=", "base64") {
		t.Fatal("routed flags wrong")
	}
	data = a.expect(400, "POST", "/api/exchanges/%2F/nox/publish", map[string]any{"properties": map[string]any{}, "routing_key": "", "payload": "", "payload_encoding": "string"})
	if _, r := errorBody(t, data); !strings.HasPrefix(r, "404 NOT_FOUND") {
		t.Errorf("publish to missing exchange: %s", data)
	}
	var msgs []map[string]any
	getBody := map[string]any{"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"}
	if err := jsonUnmarshal(a.expect(200, "POST", "/api/queues/%2F/q1/get", getBody), &msgs); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0]["payload"] != "hello" || msgs[0]["payload_encoding"] != "string" || msgs[1]["payload"] != "hi" ||
		msgs[0]["redelivered"] != false || num(msgs[0]["payload_bytes"]) != 5 || msgs[0]["exchange"] != "x1" {
		t.Fatalf("get: %v", msgs)
	}
	hasFields(t, "message", msgs[0], "payload_bytes", "redelivered", "exchange", "routing_key", "message_count", "properties", "payload", "payload_encoding")
	// Requeued: again, redelivered, base64.
	getBody["encoding"], getBody["ackmode"], getBody["count"] = "base64", "ack_requeue_false", 1
	_ = jsonUnmarshal(a.expect(200, "POST", "/api/queues/%2F/q1/get", getBody), &msgs)
	if len(msgs) != 1 || msgs[0]["redelivered"] != true || msgs[0]["payload"] != "aGVsbG8=" || num(msgs[0]["message_count"]) != 1 {
		t.Fatalf("get 2: %v", msgs)
	}
	data = a.expect(400, "POST", "/api/queues/%2F/q1/get", map[string]any{"count": 1, "encoding": "auto"})
	if _, r := errorBody(t, data); r != "[{key_missing,ackmode}]" {
		t.Errorf("missing ackmode: %s", data)
	}
	getBody["ackmode"] = "reject_requeue_true"
	a.expect(200, "POST", "/api/queues/%2F/q1/get", getBody)
	if q := a.object("/api/queues/%2F/q1"); num(q["messages"]) != 1 {
		t.Errorf("after reject_requeue_true: %v messages", q["messages"])
	}

	// if-empty, purge, if-unused, delete.
	data = a.expect(400, "DELETE", "/api/queues/%2F/q1?if-empty=true", nil)
	if _, r := errorBody(t, data); r != "queue 'q1' in vhost '/' not empty" {
		t.Errorf("if-empty: %s", data)
	}
	a.expect(204, "DELETE", "/api/queues/%2F/q1/contents", nil)
	if q := a.object("/api/queues/%2F/q1"); num(q["messages_ready"]) != 0 {
		t.Errorf("after purge: %v", q["messages_ready"])
	}
	a.expect(204, "DELETE", "/api/queues/%2F/q1?if-unused=true", nil)
	a.expect(404, "DELETE", "/api/queues/%2F/q1", nil)
	a.expect(204, "DELETE", "/api/exchanges/%2F/x1", nil)
	a.expect(404, "DELETE", "/api/exchanges/%2F/x1", nil)
	a.expect(400, "DELETE", "/api/exchanges/%2F/amq.direct", nil)
}

func TestMgmtPaging(t *testing.T) {
	_, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	for _, n := range []string{"b", "a", "c", "ab", "d"} {
		a.expect(201, "PUT", "/api/queues/%2F/"+n, nil)
	}
	a.expect(200, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{"properties": map[string]any{}, "routing_key": "d", "payload": "x", "payload_encoding": "string"})
	page := a.object("/api/queues/%2F?page=1&page_size=2&name=a&sort=name&sort_reverse=true")
	hasFields(t, "page", page, "items", "page", "page_size", "page_count", "filtered_count", "item_count", "total_count")
	items := page["items"].([]any)
	if num(page["filtered_count"]) != 2 || num(page["total_count"]) != 5 || num(page["item_count"]) != 2 || num(page["page_count"]) != 1 ||
		items[0].(map[string]any)["name"] != "ab" {
		t.Errorf("page: %v", page)
	}
	page = a.object("/api/queues?page=2&page_size=2")
	if items := page["items"].([]any); len(items) != 2 || items[0].(map[string]any)["name"] != "b" || num(page["page_count"]) != 3 {
		t.Errorf("page 2: %v", page)
	}
	page = a.object("/api/queues?page=1&page_size=1&sort=messages&sort_reverse=true")
	if items := page["items"].([]any); items[0].(map[string]any)["name"] != "d" {
		t.Errorf("sort by messages: %v", items)
	}
	page = a.object("/api/queues?page=1&name=" + url.QueryEscape("^(a|c)$") + "&use_regex=true")
	if num(page["filtered_count"]) != 2 {
		t.Errorf("regex: %v", page)
	}
	for _, bad := range []string{"page=0", "page=1&page_size=0", "page=1&page_size=501"} {
		data := a.expect(400, "GET", "/api/queues?"+bad, nil)
		if e, _ := errorBody(t, data); e != "invalid_pagination_parameters" {
			t.Errorf("%s: %s", bad, data)
		}
	}
	// The default exchange, amq.direct/fanout/headers/match/topic, and
	// amq.rabbitmq.event (in event_exchange.vhost, "/" by default).
	if l := a.list("/api/exchanges/%2F"); len(l) != 7 || !slices.ContainsFunc(l, func(x map[string]any) bool { return x["name"] == "amq.rabbitmq.event" }) {
		t.Errorf("exchanges: %d: %v", len(l), l)
	}
}

func TestMgmtVHostsUsersPermissions(t *testing.T) {
	_, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	a.expect(201, "PUT", "/api/vhosts/v1", map[string]any{"description": "d", "tags": "a,b"})
	a.expect(204, "PUT", "/api/vhosts/v1", nil)
	v := a.object("/api/vhosts/v1")
	hasFields(t, "vhost", v, "name", "description", "tags", "metadata", "tracing", "cluster_state", "messages", "message_stats")
	if v["description"] != "d" || len(v["tags"].([]any)) != 2 {
		t.Errorf("vhost: %v", v)
	}
	// The creator gets full permissions.
	if p := a.object("/api/permissions/v1/guest"); p["configure"] != ".*" {
		t.Errorf("creator permissions: %v", p)
	}
	a.expect(400, "PUT", "/api/users/bob", map[string]any{"password": "p"}) // tags_not_present
	a.expect(201, "PUT", "/api/users/bob", map[string]any{"password": "p", "tags": "management"})
	a.expect(204, "PUT", "/api/users/bob", map[string]any{"password": "p2", "tags": []string{"management", "x"}})
	u := a.object("/api/users/bob")
	hasFields(t, "user", u, "name", "password_hash", "hashing_algorithm", "tags", "limits")
	if u["hashing_algorithm"] != "rabbit_password_hashing_sha256" || len(u["tags"].([]any)) != 2 {
		t.Errorf("user: %v", u)
	}
	// password_hash as RabbitMQ exports it (the password is "p").
	a.expect(201, "PUT", "/api/users/carol", map[string]any{"password_hash": u["password_hash"], "tags": ""})
	a.expect(404, "GET", "/api/users/nobody", nil)
	data := a.expect(400, "PUT", "/api/permissions/nov/bob", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	if _, r := errorBody(t, data); r != "vhost_or_user_not_found" {
		t.Errorf("perm on missing vhost: %s", data)
	}
	a.expect(201, "PUT", "/api/permissions/v1/bob", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	a.expect(204, "PUT", "/api/permissions/v1/bob", map[string]any{"configure": "^$", "write": ".*", "read": ".*"})
	p := a.object("/api/permissions/v1/bob")
	hasFields(t, "permission", p, "user", "vhost", "configure", "write", "read")
	if l := a.list("/api/users/bob/permissions"); len(l) != 1 {
		t.Errorf("user permissions: %v", l)
	}
	if l := a.list("/api/vhosts/v1/permissions"); len(l) != 2 {
		t.Errorf("vhost permissions: %v", l)
	}
	a.expect(204, "DELETE", "/api/permissions/v1/bob", nil)
	a.expect(404, "DELETE", "/api/permissions/v1/bob", nil)
	a.expect(204, "DELETE", "/api/users/carol", nil)
	a.expect(404, "DELETE", "/api/users/carol", nil)
	a.expect(204, "DELETE", "/api/vhosts/v1", nil)
	a.expect(404, "DELETE", "/api/vhosts/v1", nil)
	if w := a.object("/api/whoami"); w["name"] != "guest" || w["tags"].([]any)[0] != "administrator" {
		t.Errorf("whoami: %v", w)
	}
}

func TestMgmtAuthRules(t *testing.T) {
	_, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	a.expect(201, "PUT", "/api/vhosts/v1", nil)
	a.expect(201, "PUT", "/api/queues/v1/qv1", nil)
	a.expect(201, "PUT", "/api/queues/%2F/qroot", nil)
	a.expect(201, "PUT", "/api/users/mon", map[string]any{"password": "p", "tags": "monitoring"})
	a.expect(201, "PUT", "/api/users/mgmt", map[string]any{"password": "p", "tags": "management"})
	a.expect(201, "PUT", "/api/users/none", map[string]any{"password": "p", "tags": ""})
	a.expect(201, "PUT", "/api/users/restr", map[string]any{"password": "p", "tags": "management"})
	a.expect(201, "PUT", "/api/permissions/v1/mgmt", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	a.expect(201, "PUT", "/api/permissions/v1/restr", map[string]any{"configure": "^$", "write": "^$", "read": "^$"})
	mon, mgmt, none, restr := a.as("mon", "p"), a.as("mgmt", "p"), a.as("none", "p"), a.as("restr", "p")

	reason := func(data []byte) string { _, r := errorBody(t, data); return r }
	// Login.
	if r := reason(a.as("guest", "wrong").expect(401, "GET", "/api/overview", nil)); r != "Login failed" {
		t.Errorf("bad password: %q", r)
	}
	a.as("", "").expect(401, "GET", "/api/overview", nil)
	if r := reason(none.expect(401, "GET", "/api/overview", nil)); r != "Not management user" {
		t.Errorf("no tags: %q", r)
	}
	// Monitoring reads everything, cannot delete or write where it has no permissions.
	if l := mon.list("/api/queues"); len(l) != 2 {
		t.Errorf("monitoring sees all queues: %v", l)
	}
	mon.expect(200, "GET", "/api/nodes", nil)
	if r := reason(mon.expect(401, "DELETE", "/api/queues/v1/qv1", nil)); r != "User not authorised to access virtual host" {
		t.Errorf("monitoring delete: %q", r)
	}
	mon.expect(401, "PUT", "/api/queues/%2F/qm", nil)
	if r := reason(mon.expect(401, "GET", "/api/users", nil)); r != "Not administrator user" {
		t.Errorf("monitoring users: %q", r)
	}
	mon.expect(401, "DELETE", "/api/vhosts/v1", nil)
	// Management sees only its vhosts.
	if l := mgmt.list("/api/queues"); len(l) != 1 || l[0]["name"] != "qv1" {
		t.Errorf("management sees only v1: %v", l)
	}
	if l := mgmt.list("/api/vhosts"); len(l) != 1 || l[0]["name"] != "v1" {
		t.Errorf("management vhosts: %v", l)
	}
	mgmt.expect(401, "GET", "/api/queues/%2F", nil)
	mgmt.expect(401, "GET", "/api/queues/%2F/qroot", nil)
	if r := reason(mgmt.expect(401, "GET", "/api/nodes", nil)); r != "Not monitor user" {
		t.Errorf("management nodes: %q", r)
	}
	mgmt.expect(201, "PUT", "/api/queues/v1/mine", nil)
	mgmt.expect(204, "DELETE", "/api/queues/v1/mine", nil)
	// Non-administrators cannot write users, vhosts, permissions.
	for _, req := range []struct{ method, path string }{{"PUT", "/api/users/x"}, {"PUT", "/api/vhosts/x"},
		{"PUT", "/api/permissions/v1/mon"}, {"DELETE", "/api/users/mon"}, {"GET", "/api/permissions"}, {"GET", "/api/definitions"}} {
		if r := reason(mgmt.expect(401, req.method, req.path, map[string]any{"password": "p", "tags": "", "configure": "", "write": "", "read": ""})); r != "Not administrator user" {
			t.Errorf("management %s %s: %q", req.method, req.path, r)
		}
	}
	// Resource permissions.
	if r := reason(restr.expect(401, "PUT", "/api/queues/v1/q", nil)); r != "Access refused." {
		t.Errorf("restricted declare: %q", r)
	}
	restr.expect(401, "DELETE", "/api/queues/v1/qv1", nil)
	restr.expect(401, "POST", "/api/queues/v1/qv1/get", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
	data := restr.expect(400, "POST", "/api/exchanges/v1/amq.default/publish", map[string]any{"properties": map[string]any{}, "routing_key": "qv1", "payload": "x", "payload_encoding": "string"})
	if r := reason(data); !strings.HasPrefix(r, "403 ACCESS_REFUSED") {
		t.Errorf("restricted publish: %q", r)
	}
}

func TestMgmtConnectionsChannelsConsumers(t *testing.T) {
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	cfg := amqp.Config{Properties: amqp.Table{"connection_name": "my-app"}}
	conn, err := amqp.DialConfig(b.URL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("cq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("cq", "ctag", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var cs []map[string]any
	waitUntil(t, "connection listed", func() bool { cs = a.list("/api/connections"); return len(cs) == 1 })
	hasFields(t, "connection", cs[0], "name", "node", "protocol", "user", "vhost", "peer_host", "peer_port", "host", "port",
		"channels", "connected_at", "client_properties", "state", "recv_oct", "send_oct")
	if cs[0]["client_properties"].(map[string]any)["connection_name"] != "my-app" || num(cs[0]["channels"]) != 1 {
		t.Errorf("connection: %v", cs[0])
	}
	name := cs[0]["name"].(string)
	a.expect(200, "GET", "/api/connections/"+url.PathEscape(name), nil)
	chs := a.list("/api/channels")
	if len(chs) != 1 || chs[0]["name"] != name+" (1)" {
		t.Errorf("channels: %v", chs)
	}
	cons := a.list("/api/consumers/%2F")
	if len(cons) != 1 || cons[0]["consumer_tag"] != "ctag" || cons[0]["queue"].(map[string]any)["name"] != "cq" || cons[0]["ack_required"] != true {
		t.Errorf("consumers: %v", cons)
	}
	if q := a.object("/api/queues/%2F/cq"); num(q["consumers"]) != 1 || len(q["consumer_details"].([]any)) != 1 {
		t.Errorf("queue consumers: %v", q)
	}
	if o := a.object("/api/overview"); num(o["object_totals"].(map[string]any)["consumers"]) != 1 || num(o["object_totals"].(map[string]any)["connections"]) != 1 {
		t.Errorf("overview totals: %v", o["object_totals"])
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	req, _ := http.NewRequest("DELETE", base+"/api/connections/"+url.PathEscape(name), nil)
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("X-Reason", "bye now")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("close: %v %v", resp, err)
	}
	e := <-closed
	if e == nil || e.Code != 320 || !strings.Contains(e.Reason, "bye now") {
		t.Errorf("close reason: %v", e)
	}
	a.expect(404, "DELETE", "/api/connections/nope", nil)
}

func TestMgmtOverviewNodesHealthRates(t *testing.T) {
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("rq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err := ch.Publish("", "rq", false, false, amqp.Publishing{Body: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "publish rate", func() bool {
		o := a.object("/api/overview")
		ms := o["message_stats"].(map[string]any)
		return num(ms["publish"]) == 50
	})
	waitUntil(t, "queue publish counted and a rate seen", func() bool {
		q := a.object("/api/queues/%2F/rq")
		ms := q["message_stats"].(map[string]any)
		return num(ms["publish"]) == 50 && num(q["messages"]) == 50
	})
	o := a.object("/api/overview?msg_rates_age=60&msg_rates_incr=5")
	hasFields(t, "overview", o, "management_version", "rabbitmq_version", "product_name", "cluster_name", "node",
		"object_totals", "queue_totals", "message_stats", "listeners", "exchange_types")
	qt := o["queue_totals"].(map[string]any)
	if num(qt["messages"]) != 50 || num(qt["messages_ready"]) != 50 {
		t.Errorf("queue totals: %v", qt)
	}
	if pd := o["message_stats"].(map[string]any)["publish_details"].(map[string]any); pd["samples"] == nil {
		t.Errorf("no samples with msg_rates_age: %v", pd)
	}
	nodes := a.list("/api/nodes")
	if len(nodes) != 1 {
		t.Fatalf("nodes: %v", nodes)
	}
	hasFields(t, "node", nodes[0], "name", "type", "running", "mem_used", "disk_free", "uptime", "processors")
	for _, p := range []string{"/api/health/checks/alarms", "/api/health/checks/local-alarms", "/api/health/checks/virtual-hosts", "/api/aliveness-test/%2F"} {
		if m := a.object(p); m["status"] != "ok" {
			t.Errorf("%s: %v", p, m)
		}
	}
	_, port, _ := strings.Cut(b.Addr, ":")
	if m := a.object("/api/health/checks/port-listener/" + port); m["status"] != "ok" {
		t.Errorf("port listener: %v", m)
	}
	data := a.expect(503, "GET", "/api/health/checks/port-listener/1", nil)
	if !strings.Contains(string(data), `"status":"failed"`) {
		t.Errorf("missing port: %s", data)
	}
	a.expect(404, "GET", "/api/aliveness-test/novhost", nil)
	a.expect(404, "GET", "/api/nosuchendpoint", nil)
}
