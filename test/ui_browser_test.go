package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/trident-broker/trident/conf"
)

// TestUIBrowser drives the management UI in headless Chromium: log in, see
// the overview, declare a queue from the queues page, publish to it from the
// default exchange's page, and get the message back on the queue's page. It
// saves a screenshot of each main page to $TRIDENT_SCREENSHOTS (default: a
// temporary directory, named in the log).
//
// Chromium comes from Debian's package (.ci/run installs it). Without it the
// test skips, unless CI is set, where it fails.
func TestUIBrowser(t *testing.T) {
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

	b := startBroker(t, func(c *conf.Config) { c.HTTP.Listen = "127.0.0.1:0" })
	base := "http://" + b.n.HTTPAddr().String()
	// A client connection, so that the connections and channels pages show a row.
	_, ch := channel(t, b.URL)
	_ = ch

	ctx := newBrowser(t, browser, 1366, 768)
	var (
		mu         sync.Mutex
		exceptions []string
	)
	if err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			mu.Lock()
			exceptions = append(exceptions, exceptionText(ev.ExceptionDetails))
			mu.Unlock()
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				t.Logf("console.error: %s", consoleText(ev))
			}
		}
	}); err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range exceptions {
			t.Errorf("uncaught JavaScript exception: %s", e)
		}
	}()

	// Each step gets its own deadline, so that a missing element fails the
	// step that waits for it.
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			// What the UI says about it: its toasts and error boxes.
			msgs, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](
				`[...document.querySelectorAll('#toasts .toast, .alert.error, #banner')].map(e => e.innerText.trim()).filter(Boolean)`))
			shot(t, ctx, shots, "failed-"+strings.NewReplacer(" ", "-", "/", "-", "#", "").Replace(step))
			t.Fatalf("%s: %v; the UI shows %q", step, err, msgs)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	// waitText waits until the element's text is want; the UI refreshes its
	// figures every few seconds.
	waitText := func(sel, want string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			got := text(sel)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s shows %q, want %q", sel, got, want)
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	page := func(hash, ready string) {
		t.Helper()
		do("open "+hash, chromedp.Navigate(base+"/"+hash), chromedp.WaitVisible(chromedp.CSS(ready)))
	}

	// Log in.
	do("load login page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("login-username")))
	shot(t, ctx, shots, "01-login")
	do("log in",
		chromedp.SendKeys(chromedp.ID("login-username"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-password"), "guest"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#overview-stats [data-stat="connections"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#node-info dd`)))
	if got := text(`#whoami b`); got != "guest" {
		t.Errorf("logged-in user shown as %q, want guest", got)
	}
	waitText(`#overview-stats [data-stat="connections"] .value`, "1")
	shot(t, ctx, shots, "02-overview")

	// Declare a queue from the queues page.
	const queue, payload = "ui-orders", "hello from the browser ✓"
	page("#/queues", "#queues-table")
	do("declare queue",
		chromedp.Click(chromedp.CSS("#add-queue summary")),
		chromedp.WaitVisible(chromedp.ID("add-queue-name")),
		chromedp.SendKeys(chromedp.ID("add-queue-name"), queue),
		chromedp.Click(chromedp.ID("add-queue-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#queues-table a[href="#/queues/%2F/`+queue+`"]`)))
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		t.Fatalf("the queue declared from the UI is not on the broker: %v", err)
	}
	shot(t, ctx, shots, "03-queues")

	// Publish to it through the default exchange's page.
	page("#/exchanges/%2F/amq.default", "#publish-routing-key")
	do("publish",
		chromedp.SendKeys(chromedp.ID("publish-routing-key"), queue),
		chromedp.SendKeys(chromedp.ID("publish-payload"), payload),
		chromedp.Click(chromedp.ID("publish-submit")),
		chromedp.WaitVisible(chromedp.CSS("#publish-result .alert")))
	if got := text("#publish-result"); got != "Message published." {
		t.Fatalf("publish result %q, want %q", got, "Message published.")
	}
	shot(t, ctx, shots, "04-exchange-default")

	// Get it back on the queue's page.
	page("#/queues/%2F/"+queue, "#get-submit")
	do("wait for the ready count", chromedp.WaitVisible(chromedp.CSS(`#queue-stats [data-stat="ready"]`)))
	do("get message",
		chromedp.Click(chromedp.ID("get-submit")),
		chromedp.WaitVisible(chromedp.CSS("#get-result pre.payload")))
	if got := text("#get-result pre.payload"); got != payload {
		t.Fatalf("payload shown %q, want %q", got, payload)
	}
	shot(t, ctx, shots, "05-queue")

	// The client connection, with its protocol.
	page("#/connections", "#connections-table tbody td .tag")
	if got := text(`#connections-table tbody td .tag`); got != "AMQP" {
		t.Errorf("connections page shows protocol %q, want AMQP", got)
	}
	shot(t, ctx, shots, "06-connections")

	// The other main pages, for the record, each checked to have rendered.
	for _, p := range []struct{ name, hash, ready string }{
		{"07-channels", "#/channels", "#channels-table tbody td"},
		{"08-exchanges", "#/exchanges", "#exchanges-table tbody a"},
		{"09-admin-users", "#/admin/users", "#users table"},
		{"10-admin-vhosts", "#/admin/vhosts", "#vhosts table"},
		{"11-admin-permissions", "#/admin/permissions", "#permissions table"},
		{"12-admin-definitions", "#/admin/definitions", "#export-submit"},
		{"13-nodes", "#/nodes", "#nodes table"},
	} {
		page(p.hash, p.ready)
		shot(t, ctx, shots, p.name)
	}

	// The overview on a large screen.
	do("large screen", chromedp.EmulateViewport(1920, 1080), chromedp.Navigate(base+"/#/"),
		chromedp.WaitVisible(chromedp.CSS(`#node-info dd`)))
	shot(t, ctx, shots, "14-overview-1920")
	do("nodes, large screen", chromedp.Navigate(base+"/#/nodes"), chromedp.WaitVisible(chromedp.CSS(`#nodes-table tbody tr[data-node]`)))
	shot(t, ctx, shots, "15-nodes-1920")
}

// chromiumPath finds the browser: $CHROMIUM, then Debian's chromium.
func chromiumPath() string {
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

// newBrowser starts headless Chromium with a fresh profile and returns a
// context for one tab; the browser stops when the test ends.
func newBrowser(t *testing.T, path string, width, height int) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height))); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// shot saves a PNG screenshot of the whole page as dir/name.png. The UI
// draws its charts and lists asynchronously, so it waits for the page to
// settle first. The viewport is stretched to the page's height for the
// capture (rather than FullScreenshot, which paints the sticky top bar in
// the middle of the page) and then put back.
func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	time.Sleep(400 * time.Millisecond)
	size, err := chromedp.Run(ctx, chromedp.Evaluate[[]int64](
		`[window.innerWidth, window.innerHeight, Math.max(document.documentElement.scrollHeight, window.innerHeight)]`))
	if err != nil || len(size) != 3 {
		t.Errorf("screenshot %s: page size: %v", name, err)
		return
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(size[0], size[2])); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	time.Sleep(150 * time.Millisecond) // charts redraw on resize
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err2 := chromedp.Do(ctx, chromedp.EmulateViewport(size[0], size[1])); err == nil {
		err = err2
	}
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
	}
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "?"
	}
	s := d.Text
	if d.Exception != nil && d.Exception.Description != "" {
		s += " " + d.Exception.Description
	}
	return fmt.Sprintf("%s (%s:%d:%d)", s, d.URL, d.LineNumber+1, d.ColumnNumber+1)
}

func consoleText(ev *runtime.EventConsoleAPICalled) string {
	var parts []string
	for _, a := range ev.Args {
		if a.Description != "" {
			parts = append(parts, a.Description)
		} else {
			parts = append(parts, string(a.Value))
		}
	}
	return strings.Join(parts, " ")
}
