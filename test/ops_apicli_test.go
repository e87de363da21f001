package test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// Issue 39 item 7: API/UI/CLI gaps — channel message_stats, the cluster
// name, tridentctl's commands and help.

// TestOpsChannelMessageStats: /api/channels and /api/channels/{name}
// carry RabbitMQ's message_stats for each AMQP channel: publish and
// confirm on a publishing channel in confirm mode; deliver, deliver_no_ack,
// get, get_no_ack, deliver_get, redeliver and ack on consuming ones; each
// with *_details.rate, which is above zero while a channel publishes.
func TestOpsChannelMessageStats(t *testing.T) {
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	conn := dial(t, b.URL)
	pub, err := conn.Channel() // 1
	if err != nil {
		t.Fatal(err)
	}
	cons, err := conn.Channel() // 2
	if err != nil {
		t.Fatal(err)
	}
	getter, err := conn.Channel() // 3
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ms-ack", "ms-noack", "ms-get"} {
		if _, err := pub.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pub.NotifyPublish(make(chan amqp.Confirmation, 100))
	publish := func(q string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := pub.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: []byte("m")}); err != nil {
				t.Fatal(err)
			}
			select {
			case c := <-confirms:
				if !c.Ack {
					t.Fatalf("publish %d to %s nacked", i, q)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no confirm")
			}
		}
	}
	publish("ms-ack", 4)
	publish("ms-noack", 3)
	publish("ms-get", 2)

	// Channel 2: 4 deliveries with acks; one nacked with requeue comes
	// back redelivered; then 4 acks. Then 3 deliveries without acks.
	ds, err := cons.Consume("ms-ack", "c-ack", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		d := receive(t, ds)
		if i == 0 {
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	if d := receive(t, ds); !d.Redelivered {
		t.Fatal("the nacked message did not come back redelivered")
	} else if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	dn, err := cons.Consume("ms-noack", "c-noack", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		receive(t, dn)
	}
	// Channel 3: one get with ack (acked), one without, one on an empty queue.
	if d, ok, err := getter.Get("ms-get", false); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	} else if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := getter.Get("ms-get", true); err != nil || !ok {
		t.Fatalf("get no-ack: %v %v", ok, err)
	}
	if _, ok, err := getter.Get("ms-get", true); err != nil || ok {
		t.Fatalf("get on the empty queue: %v %v", ok, err)
	}

	stats := func(ch map[string]any) map[string]any {
		m, _ := ch["message_stats"].(map[string]any)
		return m
	}
	want := map[int]map[string]float64{
		1: {"publish": 9, "confirm": 9, "deliver_get": 0},
		2: {"publish": 0, "deliver": 5, "deliver_no_ack": 3, "deliver_get": 8, "redeliver": 1, "ack": 4, "get": 0},
		3: {"get": 1, "get_no_ack": 1, "get_empty": 1, "deliver_get": 2, "ack": 1, "deliver": 0},
	}
	var chs []map[string]any
	match := func() bool {
		chs = a.list("/api/channels")
		if len(chs) != 3 {
			return false
		}
		for _, ch := range chs {
			m := stats(ch)
			for k, v := range want[int(num(ch["number"]))] {
				if m == nil || num(m[k]) != v {
					return false
				}
			}
		}
		return true
	}
	deadline := time.Now().Add(5 * time.Second)
	for !match() {
		if time.Now().After(deadline) {
			for _, ch := range chs {
				t.Errorf("channel %v: message_stats %v", ch["number"], stats(ch))
			}
			t.Fatalf("want %v", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, ch := range chs {
		m := stats(ch)
		for _, k := range []string{"publish", "confirm", "deliver", "deliver_no_ack", "get", "get_no_ack", "deliver_get", "redeliver", "ack"} {
			d, ok := m[k+"_details"].(map[string]any)
			if _, has := d["rate"]; !ok || !has {
				t.Errorf("channel %v: no %s_details.rate in %v", ch["number"], k, m)
			}
		}
	}
	// The same object by name.
	one := a.object("/api/channels/" + url.PathEscape(chs[0]["name"].(string)))
	if num(stats(one)["publish"]) != 9 || num(stats(one)["confirm"]) != 9 {
		t.Errorf("GET /api/channels/{name}: %v", stats(one))
	}

	// A channel publishing steadily shows a publish and a confirm rate.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = pub.PublishWithContext(context.Background(), "", "ms-noack", false, false, amqp.Publishing{Body: []byte("r")})
			}
		}
	}()
	defer func() { close(stop); <-done }()
	go func() {
		for range confirms {
		}
	}()
	waitUntil(t, "publish, confirm and deliver_no_ack rates above zero", func() bool {
		var p, c map[string]any
		for _, ch := range a.list("/api/channels") {
			switch num(ch["number"]) {
			case 1:
				p = stats(ch)
			case 2:
				c = stats(ch)
			}
		}
		rate := func(m map[string]any, k string) float64 {
			d, _ := m[k+"_details"].(map[string]any)
			return num(d["rate"])
		}
		return rate(p, "publish") > 0 && rate(p, "confirm") > 0 && rate(c, "deliver_no_ack") > 0 && rate(c, "deliver_get") > 0
	})
}

// TestOpsClusterName: the cluster name is the node's name by default,
// cluster.name when configured; PUT /api/cluster-name (administrators
// only) sets it for /api/overview and /api/cluster-name alike, as
// RabbitMQ's cluster_name global parameter, and it survives a restart.
func TestOpsClusterName(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		_, base := mgmtBroker(t, func(c *conf.Config) { c.Cluster.NodeName = "trident@ops-default" })
		a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
		if n := a.object("/api/cluster-name")["name"]; n != "trident@ops-default" {
			t.Errorf("default cluster name %v", n)
		}
		if n := a.object("/api/overview")["cluster_name"]; n != "trident@ops-default" {
			t.Errorf("default overview cluster_name %v", n)
		}
	})

	b, base := mgmtBroker(t, func(c *conf.Config) { c.Cluster.Name = "configured-name" })
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	shown := func(a apiClient) (string, string) {
		t.Helper()
		n, _ := a.object("/api/cluster-name")["name"].(string)
		o, _ := a.object("/api/overview")["cluster_name"].(string)
		return n, o
	}
	if n, o := shown(a); n != "configured-name" || o != "configured-name" {
		t.Fatalf("configured: /api/cluster-name %q, overview %q", n, o)
	}
	if gp := a.list("/api/global-parameters"); len(gp) != 0 {
		t.Errorf("global parameters before a PUT: %v", gp)
	}

	// Users who are not administrators are refused, and change nothing.
	a.expect(201, "PUT", "/api/users/ops-mon", map[string]any{"password": "pw", "tags": "monitoring"})
	a.expect(201, "PUT", "/api/users/ops-mgmt", map[string]any{"password": "pw", "tags": "management"})
	for _, u := range []string{"ops-mon", "ops-mgmt"} {
		code, body := a.as(u, "pw").do("PUT", "/api/cluster-name", map[string]any{"name": "taken-over"})
		if code != 401 {
			t.Errorf("PUT by %s: %d %s, want 401", u, code, body)
		}
		if n := a.as(u, "pw").object("/api/cluster-name")["name"]; n != "configured-name" {
			t.Errorf("GET by %s: %v", u, n)
		}
	}
	// Bad bodies.
	for _, body := range []any{map[string]any{"name": ""}, map[string]any{"name": 7}, map[string]any{},
		map[string]any{"name": strings.Repeat("n", 256)}, map[string]any{"name": "a\nb"}, "[1]"} {
		if code, data := a.do("PUT", "/api/cluster-name", body); code != 400 {
			t.Errorf("PUT %v: %d %s, want 400", body, code, data)
		}
	}
	if n, _ := shown(a); n != "configured-name" {
		t.Fatalf("after refused PUTs: %q", n)
	}

	a.expect(204, "PUT", "/api/cluster-name", map[string]any{"name": "production eu-1"})
	if n, o := shown(a); n != "production eu-1" || o != "production eu-1" {
		t.Fatalf("after PUT: /api/cluster-name %q, overview %q", n, o)
	}
	gp := a.list("/api/global-parameters")
	if len(gp) != 1 || gp[0]["name"] != "cluster_name" || gp[0]["value"] != "production eu-1" {
		t.Errorf("global parameters: %v", gp)
	}
	var defs struct {
		GlobalParameters []map[string]any `json:"global_parameters"`
	}
	a.getJSON("/api/definitions", &defs)
	if len(defs.GlobalParameters) != 1 || defs.GlobalParameters[0]["value"] != "production eu-1" {
		t.Errorf("definitions' global_parameters: %v", defs.GlobalParameters)
	}

	b.restart()
	a.base = "http://" + b.n.HTTPAddr().String()
	if n, o := shown(a); n != "production eu-1" || o != "production eu-1" {
		t.Fatalf("after a restart: /api/cluster-name %q, overview %q", n, o)
	}
}

// TestOpsClusterNameReplicated: in a cluster the name set on one node is
// the name every node shows.
func TestOpsClusterNameReplicated(t *testing.T) {
	nodes := startCluster(t, 2, "--cluster-name", "ops-pair")
	for _, nd := range nodes {
		var v map[string]any
		nd.api(t, "GET", "/api/cluster-name", nil, &v)
		if v["name"] != "ops-pair" {
			t.Fatalf("%s: configured name %v", nd.name, v["name"])
		}
	}
	eventually(t, 20*time.Second, "the PUT committed", func() bool {
		code, _ := nodes[1].tryAPI("PUT", "/api/cluster-name", map[string]any{"name": "ops-renamed"}, nil)
		return code == 204
	})
	for _, nd := range nodes {
		eventually(t, 10*time.Second, nd.name+" shows the new name", func() bool {
			var v, ov map[string]any
			_, err1 := nd.tryAPI("GET", "/api/cluster-name", nil, &v)
			_, err2 := nd.tryAPI("GET", "/api/overview", nil, &ov)
			return err1 == nil && err2 == nil && v["name"] == "ops-renamed" && ov["cluster_name"] == "ops-renamed"
		})
	}
}

// ctlRunner runs the real tridentctl binary against base as guest.
type ctlRunner struct {
	t    *testing.T
	bin  string
	base string
	user string
}

// run runs tridentctl with args and stdin (nil: empty), checks the exit
// status and returns stdout and stderr together.
func (c ctlRunner) run(want int, stdin []byte, args ...string) string {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	user := c.user
	if user == "" {
		user = "guest"
	}
	pass := "guest"
	if user != "guest" {
		pass = "pw"
	}
	cmd.Env = append(os.Environ(), "TRIDENT_URL="+c.base, "TRIDENT_USER="+user, "TRIDENT_PASSWORD="+pass)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	if code != want {
		c.t.Fatalf("tridentctl %q: exit %d, want %d\n%s", args, code, want, out)
	}
	return string(out)
}

// TestOpsCLIPublish: tridentctl publish ROUTING_KEY [BODY] publishes BODY,
// or standard input, through the default exchange unless --exchange says
// otherwise, and says whether it was routed; --format is taken before or
// after the command; errors name the object.
func TestOpsCLIPublish(t *testing.T) {
	b, base := mgmtBroker(t)
	ctl := ctlRunner{t: t, bin: tridentctl(t), base: base}
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("cli-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("cli-q", "cli-key", "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	next := func(want string) {
		t.Helper()
		var d amqp.Delivery
		var ok bool
		waitUntil(t, "a message in cli-q", func() bool {
			var err error
			d, ok, err = ch.Get("cli-q", true)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		})
		if string(d.Body) != want {
			t.Fatalf("body %q, want %q", d.Body, want)
		}
	}

	out := ctl.run(0, nil, "publish", "cli-q", "hello from the CLI")
	if !strings.Contains(out, "routed") || strings.Contains(out, "NOT") {
		t.Errorf("publish to a queue: %s", out)
	}
	next("hello from the CLI")

	out = ctl.run(0, []byte("line one\nline two\n"), "publish", "cli-q")
	if !strings.Contains(out, "routed") || strings.Contains(out, "NOT") {
		t.Errorf("publish from stdin: %s", out)
	}
	next("line one\nline two\n")

	binary := []byte{0xff, 0x00, 0xfe, 'x'}
	ctl.run(0, binary, "publish", "cli-q")
	next(string(binary))

	out = ctl.run(0, nil, "publish", "cli-key", "via amq.direct", "--exchange", "amq.direct")
	if !strings.Contains(out, "exchange 'amq.direct'") || strings.Contains(out, "NOT") {
		t.Errorf("publish through amq.direct: %s", out)
	}
	next("via amq.direct")

	if out := ctl.run(0, nil, "publish", "no-such-queue", "lost"); !strings.Contains(out, "NOT routed") {
		t.Errorf("unroutable publish: %s", out)
	}
	// The old flags still work.
	ctl.run(0, nil, "publish", "--routing-key", "cli-q", "--payload", "flags")
	next("flags")

	// --format json before or after the command.
	for _, args := range [][]string{
		{"--format", "json", "publish", "cli-q", "j1"},
		{"publish", "cli-q", "j2", "--format", "json"},
		{"publish", "--format=json", "cli-q", "j3"},
	} {
		var res map[string]any
		out := ctl.run(0, nil, args...)
		if err := json.Unmarshal([]byte(out), &res); err != nil || res["routed"] != true {
			t.Errorf("%q: %v %q", args, err, out)
		}
	}
	for _, args := range [][]string{{"--format", "json", "list", "queues"}, {"list", "queues", "--format", "json"}, {"list", "--format", "json", "queues"}} {
		var qs []map[string]any
		out := ctl.run(0, nil, args...)
		if err := json.Unmarshal([]byte(out), &qs); err != nil || len(qs) != 1 || qs[0]["name"] != "cli-q" {
			t.Errorf("%q: %v %q", args, err, out)
		}
	}
	if out := ctl.run(2, nil, "list", "queues", "--format", "yaml"); !strings.Contains(out, "--format must be table or json") {
		t.Errorf("bad format: %s", out)
	}

	// Errors name the object.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"publish", "k", "x", "--exchange", "no-x"}, "exchange 'no-x' in vhost '/' not found"},
		{[]string{"get", "no-q"}, "queue 'no-q' in vhost '/' not found"},
		{[]string{"delete", "queue", "no-q"}, "queue 'no-q' in vhost '/' not found"},
		{[]string{"purge", "queue", "no-q"}, "queue 'no-q' in vhost '/' not found"},
		{[]string{"get", "cli-q", "--vhost", "no-vhost"}, "vhost 'no-vhost' not found"},
		{[]string{"delete", "user", "no-user"}, "user 'no-user' not found"},
		{[]string{"close", "connection", "no-conn"}, "connection 'no-conn' not found"},
	} {
		if out := ctl.run(1, nil, tc.args...); !strings.Contains(out, tc.want) {
			t.Errorf("%q: %q, want %q", tc.args, out, tc.want)
		}
	}
	// Usage errors exit 2 and show the command's usage.
	if out := ctl.run(2, nil, "publish"); !strings.Contains(out, "usage: tridentctl publish ROUTING_KEY [BODY]") {
		t.Errorf("publish without arguments: %s", out)
	}
	ctl.run(2, nil, "publish", "k", "a", "b")
}

// TestOpsCLIHelp: tridentctl help lists every command, one line each;
// help CMD and CMD --help print the command's usage and its real flags.
func TestOpsCLIHelp(t *testing.T) {
	ctl := ctlRunner{t: t, bin: tridentctl(t), base: "http://127.0.0.1:1"} // no API needed
	out := ctl.run(0, nil, "help")
	cmds := []string{"overview", "list", "declare", "delete", "purge", "close", "publish", "get", "export", "import",
		"cluster-name", "forget_cluster_node", "rebalance", "check", "help"}
	lines := strings.Split(out, "\n")
	for _, c := range cmds {
		n := 0
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(l, "  ") && f[0] == c {
				n++
			}
		}
		if n != 1 {
			t.Errorf("help lists %q on %d lines:\n%s", c, n, out)
		}
	}
	if !strings.Contains(out, "--format") || !strings.Contains(out, "--url") {
		t.Errorf("help has no global flags:\n%s", out)
	}
	for _, l := range lines {
		if strings.Contains(l, "--password") && strings.Contains(l, "(default ") {
			t.Errorf("help shows the password from the environment: %s", l)
		}
	}
	if noArgs := ctl.run(2, nil); noArgs != out {
		t.Errorf("tridentctl without a command prints another text:\n%s", noArgs)
	}

	pub := ctl.run(0, nil, "help", "publish")
	for _, want := range []string{"usage: tridentctl publish ROUTING_KEY [BODY]", "standard input",
		"--exchange X ", "--persistent ", "delivery_mode 2 (persistent)", "--header k=v ", "--payload BODY "} {
		if !strings.Contains(pub, want) {
			t.Errorf("help publish has no %q:\n%s", want, pub)
		}
	}
	if again := ctl.run(0, nil, "publish", "--help"); again != pub {
		t.Errorf("publish --help differs from help publish:\n%s", again)
	}
	dq := ctl.run(0, nil, "declare", "queue", "--help")
	if !strings.Contains(dq, "usage: tridentctl declare queue NAME") || !strings.Contains(dq, "survive a restart (default true)") || strings.Contains(dq, "--source") {
		t.Errorf("declare queue --help:\n%s", dq)
	}
	if h := ctl.run(0, nil, "help", "declare", "queue"); h != dq {
		t.Errorf("help declare queue differs from declare queue --help:\n%s", h)
	}
	all := ctl.run(0, nil, "help", "declare")
	for _, k := range []string{"queue", "exchange", "binding", "user", "vhost", "permission"} {
		if !strings.Contains(all, "usage: tridentctl declare "+k) {
			t.Errorf("help declare has no form %s:\n%s", k, all)
		}
	}
	if out := ctl.run(2, nil, "help", "frobnicate"); !strings.Contains(out, `no command "frobnicate"`) {
		t.Errorf("help of an unknown command: %s", out)
	}
	if out := ctl.run(2, nil, "declare", "thing", "x"); !strings.Contains(out, "queue, exchange, binding, user, vhost, permission") {
		t.Errorf("declare of an unknown kind: %s", out)
	}
}

// TestOpsCLIClusterName: tridentctl cluster-name shows and sets the name;
// a user who is not an administrator is refused.
func TestOpsCLIClusterName(t *testing.T) {
	_, base := mgmtBroker(t, func(c *conf.Config) { c.Cluster.NodeName = "trident@cli-name" })
	ctl := ctlRunner{t: t, bin: tridentctl(t), base: base}
	if out := ctl.run(0, nil, "cluster-name"); out != "trident@cli-name\n" {
		t.Errorf("cluster-name: %q", out)
	}
	ctl.run(0, nil, "declare", "user", "cli-mon", "--password", "pw", "--tags", "monitoring")
	mon := ctl
	mon.user = "cli-mon"
	if out := mon.run(1, nil, "cluster-name", "mine"); !strings.Contains(out, "401") || !strings.Contains(out, "not_authorised") {
		t.Errorf("cluster-name by a monitoring user: %s", out)
	}
	ctl.run(0, nil, "cluster-name", "from-cli")
	if out := mon.run(0, nil, "cluster-name", "--format", "json"); !strings.Contains(out, `"name": "from-cli"`) {
		t.Errorf("cluster-name after the set: %q", out)
	}
}

// TestOpsUIChannelRates drives the UI in headless Chromium: the channels
// page shows a publishing channel's Publish and Confirm rates and a
// consuming one's Deliver / get rate, and the footer shows the cluster
// name set through the API.
func TestOpsUIChannelRates(t *testing.T) {
	browser := chromiumPath()
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not found (apt-get install -y chromium, or set CHROMIUM)")
		}
		t.Skip("chromium not found; apt-get install -y chromium, or set CHROMIUM")
	}
	b, base := mgmtBroker(t)
	apiClient{t: t, base: base, user: "guest", pass: "guest"}.expect(204, "PUT", "/api/cluster-name", map[string]any{"name": "ui-cluster"})
	conn := dial(t, b.URL)
	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	cons, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.QueueDeclare("ui-rates", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range pub.NotifyPublish(make(chan amqp.Confirmation, 64)) {
		}
	}()
	if _, err := cons.Consume("ui-rates", "", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // 50 msg/s
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = pub.PublishWithContext(context.Background(), "", "ui-rates", false, false, amqp.Publishing{Body: []byte("r")})
			}
		}
	}()
	defer func() { close(stop); <-done }()

	ctx := newBrowser(t, browser, 1600, 900)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("log in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("login-username")),
		chromedp.SendKeys(chromedp.ID("login-username"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-password"), "guest"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#node-info dd`)))
	step("channels page", chromedp.Navigate(base+"/#/channels"), chromedp.WaitVisible(chromedp.CSS(`#channels-table tbody tr`)))
	// The cells of each row by column title, as the page shows them.
	const cells = `(() => {
	  const heads = [...document.querySelectorAll('#channels-table thead th')].map(th => th.textContent.trim());
	  return [...document.querySelectorAll('#channels-table tbody tr')].map(tr => {
	    const row = {};
	    [...tr.children].forEach((td, i) => { row[heads[i]] = td.innerText.trim(); });
	    return JSON.stringify(row);
	  });
	})()`
	positive := func(s string) bool { return strings.HasSuffix(s, "/s") && s != "0/s" }
	var rows []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The page refreshes its list every few seconds; reload to ask now.
		step("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#channels-table tbody tr`)))
		var err error
		rows, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](cells))
		if err != nil {
			t.Fatal(err)
		}
		var pubOK, consOK bool
		for _, r := range rows {
			var m map[string]string
			if err := json.Unmarshal([]byte(r), &m); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(m["Channel"], "(1)") && positive(m["Publish"]) && positive(m["Confirm"]) {
				pubOK = true
			}
			if strings.HasSuffix(m["Channel"], "(2)") && positive(m["Deliver / get"]) {
				consOK = true
			}
		}
		if pubOK && consOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the channels page does not show the rates: %v", rows)
		}
		time.Sleep(500 * time.Millisecond)
	}
	footer, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("footer-info")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(footer, "cluster ui-cluster") {
		t.Errorf("footer %q does not name the cluster", footer)
	}
}
