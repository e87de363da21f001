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

// TestUIMoveMessages: the queue page's "Move messages" moves what a queue
// holds to another queue through a shovel, and a delayed exchange's page
// shows its held messages, in headless Chromium.
func TestUIMoveMessages(t *testing.T) {
	browser := chromiumPath()
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not found (apt-get install -y chromium, or set CHROMIUM)")
		}
		t.Skip("chromium not found; apt-get install -y chromium, or set CHROMIUM")
	}
	b := startBroker(t, func(c *conf.Config) { c.HTTP.Listen = "127.0.0.1:0" })
	base := "http://" + b.n.HTTPAddr().String()
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("mv-src", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishBodies(t, ch, "mv-src", 0, 25)

	ctx := newBrowser(t, browser, 1366, 768)
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			msgs, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](
				`[...document.querySelectorAll('#toasts .toast, .alert.error, #banner')].map(e => e.innerText.trim()).filter(Boolean)`))
			t.Fatalf("%s: %v; the UI shows %q", step, err, msgs)
		}
	}
	do("log in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("login-username")),
		chromedp.SendKeys(chromedp.ID("login-username"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-password"), "guest"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#node-info dd`)))
	do("open the queue", chromedp.Navigate(base+"/#/queues/%2F/mv-src"), chromedp.WaitVisible(chromedp.ID("move-submit")))
	do("move messages",
		chromedp.SendKeys(chromedp.ID("move-dest"), "mv-dst"),
		chromedp.Click(chromedp.ID("move-submit")),
		chromedp.WaitVisible(chromedp.CSS("#toasts .toast")))
	waitUntil(t, "the messages moved", func() bool {
		return queueCount(t, b.URL, "mv-dst") == 25 && queueCount(t, b.URL, "mv-src") == 0
	})

	// A delayed exchange's page shows how many messages it holds back.
	declareDelayed(t, ch, "ui-delayed", "direct")
	for range 3 {
		if err := ch.PublishWithContext(context.Background(), "ui-delayed", "k", false, false, amqp.Publishing{
			Headers: amqp.Table{"x-delay": int32(600000)}, Body: []byte("later")}); err != nil {
			t.Fatal(err)
		}
	}
	do("open the delayed exchange", chromedp.Navigate(base+"/#/exchanges/%2F/ui-delayed"),
		chromedp.WaitVisible(chromedp.CSS(`[data-stat="messages_delayed"] .value`)))
	deadline := time.Now().Add(15 * time.Second)
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(`[data-stat="messages_delayed"] .value`)))
		cancel()
		if err == nil && strings.TrimSpace(got) == "3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the exchange page shows %q delayed (%v), want 3", got, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
