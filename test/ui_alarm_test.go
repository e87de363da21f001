package test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/trident-broker/trident/conf"
)

// TestUIAlarmBanner: a raised resource alarm is shown on every page of the
// UI, and the banner goes once the alarm clears.
func TestUIAlarmBanner(t *testing.T) {
	browser := chromiumPath()
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not found (apt-get install -y chromium, or set CHROMIUM)")
		}
		t.Skip("chromium not found; apt-get install -y chromium, or set CHROMIUM")
	}
	b := startBroker(t, func(c *conf.Config) { c.HTTP.Listen = "127.0.0.1:0" })
	base := "http://" + b.n.HTTPAddr().String()
	b.n.Broker().Alarms().Set("memory", true)

	ctx := newBrowser(t, browser, 1366, 768)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.ID("login-username")),
		chromedp.SendKeys(chromedp.ID("login-username"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-password"), "guest"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("alarms")),
	); err != nil {
		t.Fatalf("log in and wait for the alarm banner: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("alarms")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "memory alarm") || !strings.Contains(text, "publishers are blocked") {
		t.Fatalf("alarm banner says %q", text)
	}
	// Another page shows it too.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#/queues"), chromedp.WaitVisible(chromedp.ID("alarms"))); err != nil {
		t.Fatalf("banner on the queues page: %v", err)
	}
	b.n.Broker().Alarms().Set("memory", false)
	deadline := time.Now().Add(15 * time.Second)
	for {
		hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('alarms').hidden`))
		if err != nil {
			t.Fatal(err)
		}
		if hidden {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("alarm banner still shown 15s after the alarm cleared")
		}
		time.Sleep(250 * time.Millisecond)
	}
}
