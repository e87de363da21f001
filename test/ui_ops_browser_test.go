package test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The operator's pages of the UI (issue 40): human numbers, a connections
// table that fits 1400 px, the connection page, channel rates, the queue's
// and exchange's rate charts and head-message figures, the policy and
// shovel pages and the cluster banner, each driven in headless Chromium
// against a broker with real AMQP traffic. Screenshots go to
// $TRIDENT_SCREENSHOTS (default: a temporary directory, named in the log).

// uiOps is one logged-in browser tab on a broker's UI.
type uiOps struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string
}

// openUIOps starts Chromium at width×height, logs in as guest and fails
// the test on any uncaught JavaScript exception.
func openUIOps(t *testing.T, base string, width, height int) *uiOps {
	t.Helper()
	browser := chromiumPath()
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not found (apt-get install -y chromium, or set CHROMIUM)")
		}
		t.Skip("chromium not found; apt-get install -y chromium, or set CHROMIUM")
	}
	shots := os.Getenv("TRIDENT_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)
	u := &uiOps{t: t, ctx: newBrowser(t, browser, width, height), base: base, shots: shots}
	var (
		mu         sync.Mutex
		exceptions []string
	)
	if err := chromedp.Listen(u.ctx, func(ev any) {
		if ev, ok := ev.(*runtime.EventExceptionThrown); ok {
			mu.Lock()
			exceptions = append(exceptions, exceptionText(ev.ExceptionDetails))
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range exceptions {
			t.Errorf("uncaught JavaScript exception: %s", e)
		}
	})
	u.do("log in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("login-username")),
		chromedp.SendKeys(chromedp.ID("login-username"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-password"), "guest"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#node-info dd`)))
	// Confirmation dialogs (close, delete) are answered yes.
	u.eval(`window.confirm = () => true`)
	return u
}

func (u *uiOps) do(step string, actions ...chromedp.Action[chromedp.Void]) {
	u.t.Helper()
	sctx, cancel := context.WithTimeout(u.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		msgs, _ := chromedp.Run(u.ctx, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll('#toasts .toast, .alert.error, #banner')].map(e => e.innerText.trim()).filter(Boolean)`))
		shot(u.t, u.ctx, u.shots, "failed-"+strings.NewReplacer(" ", "-", "/", "-", "#", "").Replace(step))
		u.t.Fatalf("%s: %v; the UI shows %q", step, err, msgs)
	}
}

// open navigates to hash and waits for ready; window.confirm stays
// answered (a hash change keeps the page).
func (u *uiOps) open(hash, ready string) {
	u.t.Helper()
	u.do("open "+hash, chromedp.Navigate(u.base+"/"+hash), chromedp.WaitVisible(chromedp.CSS(ready)))
	u.eval(`window.confirm = () => true`)
}

func (u *uiOps) eval(js string) {
	u.t.Helper()
	if _, err := chromedp.Run(u.ctx, chromedp.Evaluate[any](js)); err != nil {
		u.t.Fatalf("evaluate %s: %v", js, err)
	}
}

func (u *uiOps) text(sel string) string {
	u.t.Helper()
	sctx, cancel := context.WithTimeout(u.ctx, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		u.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// texts returns the text of every element sel matches (none: empty).
func (u *uiOps) texts(sel string) []string {
	u.t.Helper()
	out, err := chromedp.Run(u.ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll(`+jsString(sel)+`)].map(e => e.innerText.trim())`))
	if err != nil {
		u.t.Fatalf("texts of %s: %v", sel, err)
	}
	return out
}

// until polls the JavaScript expression js until it is true, for up to
// 30 s (the page refreshes every 5 s).
func (u *uiOps) until(what, js string) {
	u.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := chromedp.Run(u.ctx, chromedp.Evaluate[bool](js))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			shot(u.t, u.ctx, u.shots, "failed-"+strings.ReplaceAll(what, " ", "-"))
			u.t.Fatalf("%s: still not so after 30 s (%v)", what, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// fits fails the test unless the table sel is no wider than its panel
// and the page no wider than the window, and the top bar is one line.
func (u *uiOps) fits(sel string) {
	u.t.Helper()
	got, err := chromedp.Run(u.ctx, chromedp.Evaluate[[]int64](
		`(() => { const t = document.querySelector(`+jsString(sel)+`), w = t.closest('.table-wrap'); return [t.scrollWidth, w.clientWidth, document.documentElement.scrollWidth, window.innerWidth, document.getElementById('topbar').offsetHeight]; })()`))
	if err != nil {
		u.t.Fatal(err)
	}
	if got[0] > got[1] || got[2] > got[3] {
		u.t.Errorf("at %d px %s is %d px wide in a %d px panel (page %d px)", got[3], sel, got[0], got[1], got[2])
	}
	if got[4] > 60 {
		u.t.Errorf("the top bar is %d px high: its items wrap", got[4])
	}
}

func (u *uiOps) shot(name string) { u.t.Helper(); shot(u.t, u.ctx, u.shots, name) }

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}

// opsTraffic keeps one AMQP connection busy until the test ends:
// confirmed publishes of 1 KiB to a fanout exchange bound to ops-flow
// (consumed and acked) and ops-backlog (left to grow, with a timestamp
// property), so that every rate the pages show moves.
func opsTraffic(t *testing.T, url string) *amqp.Connection {
	t.Helper()
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("ops-ui-client")
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	sub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.ExchangeDeclare("ops-x", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ops-flow", "ops-backlog"} {
		if _, err := pub.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := pub.QueueBind(q, "", "ops-x", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pub.NotifyPublish(make(chan amqp.Confirmation, 1024))
	if err := sub.Qos(50, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Consume("ops-flow", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for d := range ds {
			_ = d.Ack(false)
		}
	}()
	go func() {
		defer wg.Done()
		body := make([]byte, 1024)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if err := pub.PublishWithContext(context.Background(), "ops-x", "", false, false, amqp.Publishing{
				Body: body, Timestamp: time.Now()}); err != nil {
				return
			}
			select {
			case <-confirms:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		_ = conn.Close()
		wg.Wait()
	})
	return conn
}

// A byte rate as the UI writes it: whole bytes, or one decimal below 10 of
// a larger unit.
var byteRateRE = regexp.MustCompile(`^(\d{1,3} B/s|\d\.\d (kB|MB|GB)/s|\d{2,3} (kB|MB|GB)/s)$`)

// A message rate: 0/s, 0.4/s, 50/s, 1,234/s.
var msgRateRE = regexp.MustCompile(`^(0|\d\.\d|[1-9]\d{0,2}(,\d{3})*)/s$`)

// clickTrafficConn follows opsTraffic's connection's link.
const clickTrafficConn = `[...document.querySelectorAll('#connections-table tbody tr')].find(r => r.innerText.includes('ops-ui-client')).querySelector('a').click()`

// TestUIOpsConnections: at 1400 px the connections table fits its panel
// and shows byte rates as people write them; its name links to the
// connection's page, which shows the client's properties, its channels
// with their rates, and closes it (the client sees 320 with the UI's
// reason); the channels page fills its rate columns.
func TestUIOpsConnections(t *testing.T) {
	bk, base := mgmtBroker(t)
	conn := opsTraffic(t, bk.URL)
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	// A second vhost (the list gets its vhost column) and a client with
	// a long name and a long product string.
	apiClient{t: t, base: base, user: "guest", pass: "guest"}.expect(201, "PUT", "/api/vhosts/ops-second-vhost", map[string]any{})
	long := amqp.NewConnectionProperties()
	long["product"] = "https://github.com/rabbitmq/amqp091-go AMQP 0.9.1 Client for the orders service"
	long.SetClientConnectionName("orders-service-eu-west-1-replica-7-consumer-pool-connection-42")
	other, err := amqp.DialConfig(bk.URL, amqp.Config{Properties: long})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })

	u := openUIOps(t, base, 1400, 900)
	u.open("#/connections", "#connections-table tbody td a")
	u.until("the byte rates are non-zero", `[...document.querySelectorAll('#connections-table tbody td.num')].some(td => /[1-9]/.test(td.innerText) && /B\/s/.test(td.innerText))`)
	u.fits("#connections-table")
	rates := u.texts(`#connections-table tbody td.num`)
	var byteRates int
	for _, r := range rates {
		if strings.Contains(r, "B/s") {
			byteRates++
			if !byteRateRE.MatchString(r) {
				t.Errorf("connections table shows the byte rate %q", r)
			}
		}
	}
	if byteRates != 4 {
		t.Errorf("connections table has %d byte rates, want 4 (from and to each client): %q", byteRates, rates)
	}
	u.shot("ops-01-connections-1400")

	// The connection's page.
	u.eval(clickTrafficConn)
	u.do("follow the connection link", chromedp.WaitVisible(chromedp.CSS(`#connection-stats [data-stat="recv"]`)))
	if got := u.text(`#connection-client-properties`); !strings.Contains(got, "ops-ui-client") || !strings.Contains(got, "consumer_cancel_notify") {
		t.Errorf("client properties shown as %q, want the connection_name and the capabilities", got)
	}
	for _, k := range []string{"recv", "send"} {
		u.until("the connection's "+k+" rate", `/[1-9]/.test(document.querySelector('#connection-stats [data-stat="`+k+`"] .value').innerText)`)
		if got := u.text(`#connection-stats [data-stat="` + k + `"] .value`); !byteRateRE.MatchString(got) {
			t.Errorf("connection page %s rate %q", k, got)
		}
	}
	if got := u.texts(`#connection-channels-table tbody tr`); len(got) != 2 {
		t.Errorf("connection page lists %d channels, want 2: %q", len(got), got)
	}
	// Columns: channel, mode, prefetch, consumers, unacked, unconfirmed,
	// publish, confirm, deliver/get, ack.
	u.until("the channels' publish and deliver rates", `(() => { const rs = [...document.querySelectorAll('#connection-channels-table tbody tr')].map(r => [...r.cells].map(c => c.innerText.trim()));
		return rs.some(r => /[1-9]/.test(r[6]) && /[1-9]/.test(r[7])) && rs.some(r => /[1-9]/.test(r[8]) && /[1-9]/.test(r[9])); })()`)
	for _, row := range u.texts(`#connection-channels-table tbody tr`) {
		for _, cell := range strings.Split(row, "\t")[6:] {
			if !msgRateRE.MatchString(strings.TrimSpace(cell)) {
				t.Errorf("channel rate %q in row %q", cell, row)
			}
		}
	}
	u.shot("ops-02-connection")

	// The channels page fills its rate columns too.
	u.open("#/channels", "#channels-table tbody td a")
	u.until("the channels page's rates", `[...document.querySelectorAll('#channels-table tbody tr')].some(r => [...r.cells].some(c => /^[1-9][\d,.]*\/s$/.test(c.innerText.trim())))`)
	u.fits("#channels-table")
	u.shot("ops-03-channels")

	// Close it from its page.
	u.open("#/connections", "#connections-table tbody td a")
	u.eval(clickTrafficConn)
	u.do("open the connection again", chromedp.WaitVisible(chromedp.ID("connection-close")))
	u.eval(`window.confirm = () => true`)
	u.do("close it", chromedp.Click(chromedp.ID("connection-close")))
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced || !strings.Contains(e.Reason, "Closed via management UI") {
			t.Errorf("the client saw %v, want 320 with the UI's reason", e)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the connection was not closed")
	}
	u.until("back on the connections list", `location.hash === '#/connections'`)
}

// TestUIOpsRateCharts: the queue and exchange pages chart the rates they
// sample (an SVG line per series once two samples are in) and the queue
// page shows the head message's age and timestamp.
func TestUIOpsRateCharts(t *testing.T) {
	bk, base := mgmtBroker(t)
	opsTraffic(t, bk.URL)
	u := openUIOps(t, base, 1400, 900)

	u.open("#/queues/%2F/ops-flow", "#queue-rate-chart svg")
	u.until("the queue chart's publish line", `(() => { const l = document.querySelector('#queue-rate-chart polyline[data-series="publish"]'); return !!l && l.getAttribute('points').split(' ').length >= 2; })()`)
	for _, k := range []string{"publish", "deliver_get", "ack"} {
		u.until("the queue chart's "+k+" legend", `/[1-9]/.test(document.querySelector('#queue-rate-chart .legend [data-series="`+k+`"] .v').innerText)`)
		if got := u.text(`#queue-rate-chart .legend [data-series="` + k + `"] .v`); !msgRateRE.MatchString(got) {
			t.Errorf("queue chart legend %s shows %q", k, got)
		}
	}
	// The vhost's latency figures, since start and recent.
	for _, m := range []string{"publish_to_confirm", "enqueue_to_deliver", "deliver_to_ack"} {
		row := `#vhost-latency-table tr[data-metric="` + m + `"][data-protocol="amqp091"]`
		u.until("the "+m+" latency row with a recent p99", `(() => { const r = document.querySelector('`+row+`'); return !!r && /\d (ms|s)$/.test(r.cells[6].innerText.trim()); })()`)
		cells := strings.Split(u.text(row), "\t")
		if len(cells) != 7 || !regexp.MustCompile(`^[1-9][\d,]*$`).MatchString(strings.TrimSpace(cells[2])) {
			t.Fatalf("%s latency row %q", m, cells)
		}
		for _, c := range cells[3:] {
			if !regexp.MustCompile(`^\d+(\.\d+)? (ms|s)$`).MatchString(strings.TrimSpace(c)) {
				t.Errorf("%s latency figure %q in %q", m, c, cells)
			}
		}
	}
	u.shot("ops-04-queue-chart")

	u.open("#/queues/%2F/ops-backlog", "#queue-rate-chart svg")
	u.until("the head message's age", `!!document.getElementById('queue-head-age')`)
	age := u.text("#queue-head-age")
	if !regexp.MustCompile(`^(\d+ ms|\d+s|\d+m \d+s)$`).MatchString(age) {
		t.Errorf("head message age shown as %q", age)
	}
	ts := u.text("#queue-head-timestamp")
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`).MatchString(ts) {
		t.Errorf("head message timestamp shown as %q", ts)
	}
	u.shot("ops-05-queue-backlog")

	u.open("#/exchanges/%2F/ops-x", "#exchange-rate-chart svg")
	u.until("the exchange chart's publish-in line", `(() => { const l = document.querySelector('#exchange-rate-chart polyline[data-series="publish_in"]'); return !!l && l.getAttribute('points').split(' ').length >= 2; })()`)
	u.until("the exchange chart's rates", `/[1-9]/.test(document.querySelector('#exchange-rate-chart .legend [data-series="publish_out"] .v').innerText)`)
	u.shot("ops-06-exchange-chart")
}

// TestUIOpsShovels: the shovels page declares a shovel from its form,
// lists it running with the messages it moved, restarts it (the count
// starts again) and deletes it.
func TestUIOpsShovels(t *testing.T) {
	bk, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, bk.URL)
	for _, q := range []string{"ui-sh-src", "ui-sh-dst"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	u := openUIOps(t, base, 1400, 900)
	u.open("#/shovels", "#shovels table")
	u.do("add a shovel",
		chromedp.Click(chromedp.CSS("#add-shovel summary")),
		chromedp.WaitVisible(chromedp.ID("shovel-name")),
		chromedp.SendKeys(chromedp.ID("shovel-name"), "ui-mover"),
		chromedp.SendKeys(chromedp.ID("shovel-src-name"), "ui-sh-src"),
		chromedp.SendKeys(chromedp.ID("shovel-dest-name"), "ui-sh-dst"),
		chromedp.Click(chromedp.ID("shovel-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#shovels-table tr[data-shovel="ui-mover"]`)))
	p := api.object("/api/parameters/shovel/%2F/ui-mover")
	v, _ := p["value"].(map[string]any)
	if v["src-queue"] != "ui-sh-src" || v["dest-queue"] != "ui-sh-dst" || v["src-uri"] != "amqp://" || v["ack-mode"] != "on-confirm" {
		t.Fatalf("the form declared %v", p)
	}
	publishBodies(t, ch, "ui-sh-src", 0, 30)
	waitUntil(t, "the shovel moved 30", func() bool { return queueCount(t, bk.URL, "ui-sh-dst") == 30 })
	row := `#shovels-table tr[data-shovel="ui-mover"]`
	u.until("running with 30 moved", `(() => { const r = document.querySelector('`+row+`'); return !!r && r.querySelector('.shovel-state').innerText.startsWith('running') && r.querySelector('.shovel-moved').innerText === '30'; })()`)
	u.shot("ops-07-shovels")

	u.do("restart", chromedp.Click(chromedp.CSS(row+` [data-restart]`)))
	u.until("restarted: the count starts again", `(() => { const r = document.querySelector('`+row+`'); return !!r && r.querySelector('.shovel-moved').innerText === '0'; })()`)
	publishBodies(t, ch, "ui-sh-src", 30, 35)
	waitUntil(t, "it moves after the restart", func() bool { return queueCount(t, bk.URL, "ui-sh-dst") == 35 })

	u.do("delete", chromedp.Click(chromedp.CSS(row+` [data-delete]`)))
	u.until("the row gone", `!document.querySelector('`+row+`')`)
	api.expect(404, "GET", "/api/parameters/shovel/%2F/ui-mover", nil)
}

// TestUIOpsNodeDownBanner: when a member of the cluster is down, every
// page says so in the banner (with the node's name), and a raised
// resource alarm is shown beside it.
func TestUIOpsNodeDownBanner(t *testing.T) {
	nodes := startCluster(t, 3)
	u := openUIOps(t, "http://"+nodes[0].web, 1400, 900)
	u.open("#/queues", "#queues-table")
	if hidden, err := chromedp.Run(u.ctx, chromedp.Evaluate[bool](`document.getElementById('alarms').hidden`)); err != nil || !hidden {
		t.Fatalf("banner shown with every node up (%v)", err)
	}
	victim := nodes[2]
	if err := victim.p.Kill(); err != nil {
		t.Fatalf("kill %s: %v", victim.name, err)
	}
	u.until("the node-down banner", `(() => { const b = document.getElementById('alarms'); return !b.hidden && b.innerText.includes('down') && b.innerText.includes(`+jsString(victim.name)+`); })()`)
	u.shot("ops-08-node-down-banner")
	u.open("#/shovels", "#shovels table")
	u.until("the banner on another page", `!document.getElementById('alarms').hidden && !!document.getElementById('nodes-down')`)
	if got := u.text("#nodes-down"); !strings.Contains(got, victim.name) || strings.Contains(got, nodes[1].name) {
		t.Errorf("banner says %q, want %s (and not %s)", got, victim.name, nodes[1].name)
	}
}

// TestUIOpsPolicyForm: Admin › Policies adds a policy from its form (it
// takes effect on a queue declared over AMQP), edits it and deletes it.
func TestUIOpsPolicyForm(t *testing.T) {
	bk, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, bk.URL)
	if _, err := ch.QueueDeclare("ui-pol.q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	u := openUIOps(t, base, 1400, 900)
	u.open("#/admin/policies", "#policies table")
	u.do("add a policy",
		chromedp.Click(chromedp.CSS("#add-policy summary")),
		chromedp.WaitVisible(chromedp.ID("policy-name")),
		chromedp.SendKeys(chromedp.ID("policy-name"), "ui-limit"),
		chromedp.SendKeys(chromedp.ID("policy-pattern"), `^ui-pol\.`),
		chromedp.SetValue(chromedp.ID("policy-apply-to"), "queues"),
		chromedp.SendKeys(chromedp.ID("policy-definition"), "max-length = 5\noverflow = reject-publish"),
		chromedp.Click(chromedp.ID("policy-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#policies-table tr[data-policy="ui-limit"]`)))
	p := api.object("/api/policies/%2F/ui-limit")
	def, _ := p["definition"].(map[string]any)
	if p["pattern"] != `^ui-pol\.` || p["apply-to"] != "queues" || num(def["max-length"]) != 5 || def["overflow"] != "reject-publish" {
		t.Fatalf("the form set %v", p)
	}
	waitUntil(t, "the policy on the queue", func() bool { return api.object("/api/queues/%2F/ui-pol.q")["policy"] == "ui-limit" })
	publishBodies(t, ch, "ui-pol.q", 0, 5)
	if n := queueCount(t, bk.URL, "ui-pol.q"); n != 5 {
		t.Fatalf("queue holds %d, want 5", n)
	}
	u.shot("ops-09-policies")

	// Edit, on a fresh page: the form loads the policy; a new max-length
	// replaces it.
	u.open("#/queues", "#queues-table")
	u.open("#/admin/policies", `#policies-table tr[data-policy="ui-limit"]`)
	u.do("edit", chromedp.Click(chromedp.CSS(`#policies-table tr[data-policy="ui-limit"] [data-edit]`)),
		chromedp.WaitVisible(chromedp.ID("policy-definition")))
	loaded, err := chromedp.Run(u.ctx, chromedp.Evaluate[[]string](`['policy-name','policy-pattern','policy-apply-to','policy-definition'].map(id => document.getElementById(id).value)`))
	if err != nil || len(loaded) != 4 || loaded[0] != "ui-limit" || loaded[1] != `^ui-pol\.` || loaded[2] != "queues" || !strings.Contains(loaded[3], "max-length = 5") {
		t.Fatalf("edit loaded %q (%v)", loaded, err)
	}
	u.eval(`document.getElementById('policy-definition').value = 'max-length = 3'`)
	u.do("save the edit", chromedp.Click(chromedp.ID("policy-submit")), chromedp.WaitVisible(chromedp.CSS("#toasts .toast")))
	waitUntil(t, "max-length 3", func() bool {
		def, _ := api.object("/api/policies/%2F/ui-limit")["definition"].(map[string]any)
		return num(def["max-length"]) == 3 && def["overflow"] == nil
	})

	// The list re-renders after a save: click the button it shows now.
	time.Sleep(500 * time.Millisecond)
	u.eval(`document.querySelector('#policies-table tr[data-policy="ui-limit"] [data-delete]').click()`)
	u.until("the row gone", `!document.querySelector('#policies-table tr[data-policy="ui-limit"]')`)
	api.expect(404, "GET", "/api/policies/%2F/ui-limit", nil)

	// Operator policies: a key that is no limit is refused with the
	// server's reason; a limit is set and shows on the queue's page.
	u.open("#/admin/operator-policies", "#operator-policies table")
	u.do("a refused operator policy",
		chromedp.Click(chromedp.CSS("#add-operator-policy summary")),
		chromedp.WaitVisible(chromedp.ID("operator-policy-name")),
		chromedp.SendKeys(chromedp.ID("operator-policy-name"), "ui-cap"),
		chromedp.SendKeys(chromedp.ID("operator-policy-pattern"), `^ui-pol\.`),
		chromedp.SendKeys(chromedp.ID("operator-policy-definition"), "dead-letter-exchange = dlx"),
		chromedp.Click(chromedp.ID("operator-policy-submit")),
		chromedp.WaitVisible(chromedp.CSS("#toasts .toast.error")))
	if got := u.text("#toasts .toast.error"); !strings.Contains(got, "not allowed in an operator policy") {
		t.Errorf("refusal shown as %q", got)
	}
	u.eval(`document.getElementById('operator-policy-definition').value = 'max-length = 2'`)
	u.do("an operator policy", chromedp.Click(chromedp.ID("operator-policy-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#operator-policies-table tr[data-policy="ui-cap"]`)))
	op := api.object("/api/operator-policies/%2F/ui-cap")
	if d, _ := op["definition"].(map[string]any); num(d["max-length"]) != 2 || op["apply-to"] != "queues" {
		t.Fatalf("the form set the operator policy %v", op)
	}
	u.shot("ops-10-operator-policies")
	u.open("#/queues/%2F/ui-pol.q", "#queue-operator-policy")
	if got := u.text("#queue-operator-policy"); got != "ui-cap" {
		t.Errorf("queue page shows operator policy %q", got)
	}
	if n := queueCount(t, bk.URL, "ui-pol.q"); n != 2 {
		t.Errorf("queue holds %d under the operator policy's max-length 2", n)
	}
}
