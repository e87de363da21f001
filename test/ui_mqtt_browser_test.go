package test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/eclipse/paho.golang/paho"
)

// TestUIMQTTBrowser drives the MQTT page (#/mqtt) in headless Chromium:
// the clients with their protocol versions, one client's subscriptions,
// the sessions with an offline one's queued messages, the retained
// messages browsed by a topic filter, one of them deleted, and a client
// disconnected from its page (MQTT 5: DISCONNECT 0x98). Screenshots go
// to $TRIDENT_SCREENSHOTS (default: a temporary directory, named in the
// log).
func TestUIMQTTBrowser(t *testing.T) {
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

	b, api := mqttAPIBroker(t)
	base := api.base
	addr := b.mqttAddr()
	dev5, _ := dial5(t, addr, mqttConnect5("ui-dev-5", "alice", true, 0, 45))
	dev5.subscribeWith(t, &paho.SubscribeProperties{SubscriptionIdentifier: intp(3)},
		paho.SubscribeOptions{Topic: "devices/+/status", QoS: 1, NoLocal: true})
	dev3 := dial3(t, "tcp://"+addr, "ui-dev-3", false, mqttAs3("bob"))
	dev3.subscribe(t, "cmd/#", 1)
	off := dial3(t, "tcp://"+addr, "ui-offline", false, mqttAs3("alice"))
	off.subscribe(t, "alerts/#", 1)
	off.Disconnect(50)
	dev3.publish(t, "devices/1/status", 1, true, "online")
	dev3.publish(t, "devices/2/status", 1, true, "offline")
	dev3.publish(t, "cfg/bin", 0, true, string([]byte{0xde, 0xad, 0xbe, 0xef}))
	dev3.publish(t, "alerts/fire", 1, false, "a1")
	dev3.publish(t, "alerts/flood", 1, false, "a2")
	waitUntil(t, "ui-offline's queued messages", func() bool {
		return num(api.object("/api/mqtt/sessions/%2F/ui-offline")["queued"]) == 2
	})
	dev5.receive(t) // the two retained statuses, now delivered live
	dev5.receive(t)

	ctx := newBrowser(t, browser, 1366, 800)
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " | " + document.body.innerText.slice(0, 800)`))
			t.Fatalf("%s: %v\npage: %s", step, err, page)
		}
	}
	// rows returns the text of each row of a table, waiting until
	// cond holds for them (tables are redrawn when an answer arrives).
	rows := func(table string, what string, cond func([]string) bool) []string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
				`Array.from(document.querySelectorAll('`+table+` tbody tr')).map((r) => r.innerText)`))
			if err == nil && cond(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: rows of %s: %q (%v)", what, table, got, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	find := func(rs []string, key string) string {
		for _, r := range rs {
			if strings.Contains(r, key) {
				return r
			}
		}
		return ""
	}
	do("log in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("login-username")),
		chromedp.SendKeys(chromedp.ID("login-username"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-password"), "guest"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#node-info dd`)))
	// The page asks before it deletes: say yes.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.confirm = () => true; true`)); err != nil {
		t.Fatal(err)
	}

	// Clients.
	do("the MQTT entry of the menu", chromedp.Click(chromedp.CSS(`#nav a[data-nav="mqtt"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#mqtt-clients-table tbody tr a`)))
	cl := rows("#mqtt-clients-table", "clients", func(r []string) bool { return len(r) == 2 })
	if r := find(cl, "ui-dev-5"); !strings.Contains(r, "alice") || !strings.Contains(r, "MQTT") || !strings.Contains(r, "5") ||
		!strings.Contains(r, "45s") || !strings.Contains(r, "clean") {
		t.Errorf("ui-dev-5's row %q", r)
	}
	if r := find(cl, "ui-dev-3"); !strings.Contains(r, "bob") || !strings.Contains(r, "3.1.1") || !strings.Contains(r, "never") {
		t.Errorf("ui-dev-3's row %q", r)
	}
	shot(t, ctx, shots, "mqtt-1-clients")

	// One client, its subscriptions.
	do("ui-dev-5's page", chromedp.Click(chromedp.CSS(`#mqtt-clients-table a[href$="/ui-dev-5"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#mqtt-subs-table tbody tr`)))
	subs := rows("#mqtt-subs-table", "subscriptions", func(r []string) bool { return len(r) == 1 })
	if !strings.Contains(subs[0], "devices/+/status") || !strings.Contains(subs[0], "yes") || !strings.Contains(subs[0], "3") {
		t.Errorf("ui-dev-5's subscription row %q", subs[0])
	}
	shot(t, ctx, shots, "mqtt-2-client")

	// Sessions.
	do("sessions", chromedp.Navigate(base+"/#/mqtt/sessions"), chromedp.WaitVisible(chromedp.CSS(`#mqtt-sessions-table tbody tr`)))
	ss := rows("#mqtt-sessions-table", "sessions", func(r []string) bool { return len(r) == 3 })
	if r := find(ss, "ui-offline"); !strings.Contains(r, "offline") || !strings.Contains(r, "\t2\t") || !strings.Contains(r, "Delete") {
		t.Errorf("ui-offline's row %q", r)
	}
	if r := find(ss, "ui-dev-3"); !strings.Contains(r, "connected") || strings.Contains(r, "Delete") {
		t.Errorf("ui-dev-3's session row %q", r)
	}
	shot(t, ctx, shots, "mqtt-3-sessions")

	// Retained messages: browse by a filter, delete one.
	do("retained", chromedp.Navigate(base+"/#/mqtt/retained"), chromedp.WaitVisible(chromedp.ID("mqtt-retained-topic")))
	all := rows("#mqtt-retained-table", "all retained", func(r []string) bool { return len(r) == 3 })
	if r := find(all, "cfg/bin"); !strings.Contains(r, "base64") || !strings.Contains(r, "3q2+7w==") {
		t.Errorf("cfg/bin's row %q, want its payload in base64", r)
	}
	shot(t, ctx, shots, "mqtt-4-retained-all")
	do("filter devices/#", chromedp.SetValue(chromedp.ID("mqtt-retained-topic"), "devices/#"),
		chromedp.Click(chromedp.ID("mqtt-retained-search")))
	rt := rows("#mqtt-retained-table", "devices/#", func(r []string) bool {
		return len(r) == 2 && find(r, "cfg/bin") == ""
	})
	if r := find(rt, "devices/2/status"); !strings.Contains(r, "offline") || !strings.Contains(r, "7 B") {
		t.Errorf("devices/2/status's row %q", r)
	}
	shot(t, ctx, shots, "mqtt-4-retained-filtered")
	do("delete devices/2/status", chromedp.Click(chromedp.CSS(`#mqtt-retained-table button[data-clear="devices/2/status"]`)))
	rows("#mqtt-retained-table", "after the delete", func(r []string) bool {
		return len(r) == 1 && find(r, "devices/1/status") != ""
	})
	var left map[string]any
	api.getJSON("/api/mqtt/retained?topic=devices/%2B/status", &left)
	if n := num(left["filtered_count"]); n != 1 {
		t.Errorf("the API lists %v retained statuses after the UI's delete", n)
	}

	// Disconnect ui-dev-5 from its page.
	do("ui-dev-5's page again", chromedp.Navigate(base+"/#/mqtt/client/%2F/ui-dev-5"), chromedp.WaitVisible(chromedp.CSS(`#mqtt-subs-table tbody tr`)))
	do("disconnect", chromedp.Click(chromedp.ID("mqtt-disconnect")))
	select {
	case d := <-dev5.disc:
		if d.ReasonCode != 0x98 {
			t.Errorf("DISCONNECT reason %#x, want 0x98", d.ReasonCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ui-dev-5 got no DISCONNECT")
	}
	do("back on the list", chromedp.WaitVisible(chromedp.CSS(`#mqtt-clients-table`)))
	rows("#mqtt-clients-table", "clients after the disconnect", func(r []string) bool {
		return len(r) == 1 && find(r, "ui-dev-3") != ""
	})
	shot(t, ctx, shots, "mqtt-5-after")
	if code, _ := api.do("GET", "/api/mqtt/clients/%2F/ui-dev-5", nil); code != http.StatusNotFound {
		t.Errorf("ui-dev-5 still connected: %d", code)
	}
}
