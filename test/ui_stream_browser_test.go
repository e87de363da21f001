package test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// TestUIStreamBrowser drives a stream's page in headless Chromium: the
// Stream panel (segments, offsets, a named consumer's offset and lag) and
// the Browse and search panel (a page from an offset, a body search), and
// browses a classic queue without taking its message.
func TestUIStreamBrowser(t *testing.T) {
	browser := chromiumPath()
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not found (apt-get install -y chromium, or set CHROMIUM)")
		}
		t.Skip("chromium not found; apt-get install -y chromium, or set CHROMIUM")
	}
	b := startBroker(t, func(c *conf.Config) { c.HTTP.Listen = "127.0.0.1:0" })
	base := "http://" + b.n.HTTPAddr().String()
	declareStream(t, b.URL, "ui-stream", streamArgs("x-max-age", "7D"))
	_, pub := channel(t, b.URL)
	streamPublish(t, pub, "", "ui-stream", numbered("event-", 0, 30), nil)
	_, ds := consumeStream(t, b.URL, "ui-stream", 10, amqp.Table{"x-stream-offset": "first", "x-stream-consumer-name": "billing"})
	takeStream(t, ds, 10) // acked up to offset 9: lag 20
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("ui-classic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	streamPublish(t, ch, "", "ui-classic", []string{"kept"}, nil)

	ctx := newBrowser(t, browser, 1366, 900)
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	// text reads an element's text; a read that loses its node to a
	// re-render (the page redraws a panel when a result arrives) is
	// tried again until 20 s have passed.
	text := func(sel string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
			cancel()
			if err == nil {
				return strings.TrimSpace(s)
			}
			if time.Now().After(deadline) {
				t.Fatalf("text of %s: %v", sel, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	do("log in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("login-username")),
		chromedp.SendKeys(chromedp.ID("login-username"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-password"), "guest"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#node-info dd`)))

	do("stream page", chromedp.Navigate(base+"/#/queues/%2F/ui-stream"), chromedp.WaitVisible(chromedp.ID("stream-last-offset")))
	if got := text("#stream-first-offset") + "/" + text("#stream-last-offset"); got != "0/29" {
		t.Errorf("stream offsets shown %q, want 0/29", got)
	}
	if got := text("#stream-consumers tbody tr"); !strings.Contains(got, "billing") || !strings.Contains(got, "9") || !strings.Contains(got, "20") {
		t.Errorf("named consumer row %q, want billing at 9 with lag 20", got)
	}
	do("browse from offset 25",
		chromedp.SetValue(chromedp.ID("browse-from"), "25"),
		chromedp.Click(chromedp.ID("browse-submit")),
		chromedp.WaitVisible(chromedp.CSS("#browse-result .browse-msg")))
	if got := text("#browse-result .browse-msg pre.payload"); got != "event-25" {
		t.Errorf("first browsed payload %q, want event-25", got)
	}
	if got := text("#browse-summary"); !strings.Contains(got, "5 shown") || !strings.Contains(got, "to the end") {
		t.Errorf("browse summary %q", got)
	}
	do("search the body",
		chromedp.SetValue(chromedp.ID("browse-from"), "0"),
		chromedp.SendKeys(chromedp.ID("browse-body"), "-1"),
		chromedp.Click(chromedp.ID("browse-submit")))
	// event-1 and event-10..19 match.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasPrefix(text("#browse-summary"), "11 shown") {
		if time.Now().After(deadline) {
			t.Fatalf("body search summary %q, want 11 shown", text("#browse-summary"))
		}
		time.Sleep(100 * time.Millisecond)
	}

	do("classic queue page", chromedp.Navigate(base+"/#/queues/%2F/ui-classic"), chromedp.WaitVisible(chromedp.ID("browse-submit")))
	do("browse the queue", chromedp.Click(chromedp.ID("browse-submit")), chromedp.WaitVisible(chromedp.CSS("#browse-result .browse-msg")))
	if got := text("#browse-result .browse-msg pre.payload"); got != "kept" {
		t.Errorf("browsed queue payload %q", got)
	}
	if q, err := ch.QueueDeclarePassive("ui-classic", true, false, false, false, nil); err != nil || q.Messages != 1 {
		t.Fatalf("after browsing in the UI: %+v %v", q, err)
	}
}
