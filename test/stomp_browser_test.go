package test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// stChromium finds Debian's chromium (.ci/run installs it), or $CHROMIUM.
func stChromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestSTOMPBrowser loads test/browser/stomp/index.html in headless
// Chromium. The page uses the vendored @stomp/stompjs over Web-STOMP,
// subscribes to /queue/browser-in, receives a message the test publishes
// over AMQP, and answers on its reply-to, which the test consumes over AMQP.
func TestSTOMPBrowser(t *testing.T) {
	browser := stChromium()
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not found (apt-get install -y chromium, or set CHROMIUM)")
		}
		t.Skip("chromium not found; apt-get install -y chromium, or set CHROMIUM")
	}
	// The page is served from another port than Web-STOMP's: a
	// cross-origin WebSocket, which the broker accepts only because
	// http.allowed_origins lists the page's origin.
	page := httptest.NewServer(http.FileServer(http.Dir("browser/stomp")))
	t.Cleanup(page.Close)
	b := stBroker(t, func(c *conf.Config) { c.HTTP.AllowedOrigins = []string{page.URL} })
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("browser-replies", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	replies, err := ch.Consume("browser-replies", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(cancelCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelTimeout)

	pageURL := page.URL + "/index.html?ws=" + url.QueryEscape(stWSURL(b))
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`window.stompState === "subscribed" || window.stompErrors.length > 0`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("page did not subscribe: %v", err)
	}
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.stompState`))
	if err != nil || state != "subscribed" {
		errs, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.stompErrors`))
		t.Fatalf("page state %q (%v), errors %v", state, err, errs)
	}
	if version, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.stompVersion`)); err != nil || version != "1.2" {
		t.Fatalf("negotiated version %q (%v)", version, err)
	}

	err = ch.Publish("", "browser-in", false, false, amqp.Publishing{Body: []byte("hello browser"),
		ReplyTo: "browser-replies", CorrelationId: "b-1", ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-replies:
		if string(d.Body) != "echo: hello browser" || d.CorrelationId != "b-1" {
			t.Fatalf("reply %q correlation %q", d.Body, d.CorrelationId)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no reply from the browser")
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.received.length`)); err != nil || n != 1 {
		t.Fatalf("page received %d messages (%v)", n, err)
	}
	stWaitReady(t, b, "browser-in", 0, 0) // the page acked it
}
