package test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// TestOAuth2UIBrowser drives the management UI's OAuth 2 login in headless
// Chromium against the loopback provider: "Log in with OAuth 2" sends the
// browser to the provider's authorization endpoint, which approves at once
// and redirects back with a code; the UI redeems it with its PKCE verifier
// (the provider checks it) and logs in with the access token. Then a
// pasted token logs in, and a forged one is refused with the reason.
//
// Chromium as in TestUIBrowser: without it the test skips, unless CI is
// set, where it fails.
func TestOAuth2UIBrowser(t *testing.T) {
	browser := chromiumPath()
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not found (apt-get install -y chromium, or set CHROMIUM)")
		}
		t.Skip("chromium not found; apt-get install -y chromium, or set CHROMIUM")
	}
	p := newIDP(t)
	p.loginScopes = []string{"rabbitmq.tag:administrator", "rabbitmq.configure:*/*", "rabbitmq.write:*/*", "rabbitmq.read:*/*"}
	b, base := oauthBroker(t, p)
	_ = b

	ctx := newBrowser(t, browser, 1280, 800)
	var (
		mu         sync.Mutex
		exceptions []string
	)
	if err := chromedp.Listen(ctx, func(ev any) {
		if ev, ok := ev.(*runtime.EventExceptionThrown); ok {
			mu.Lock()
			exceptions = append(exceptions, exceptionText(ev.ExceptionDetails))
			mu.Unlock()
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
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			msgs, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](
				`[...document.querySelectorAll('.alert.error, #banner')].map(e => e.innerText.trim()).filter(Boolean)`))
			t.Fatalf("%s: %v; the UI shows %q", step, err, msgs)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " | " + document.body.innerText.slice(0, 500)`))
			t.Fatalf("wait for %s: %v; the page: %s", sel, err, page)
		}
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}

	// Authorization code + PKCE.
	do("open the login page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("login-oauth")))
	do("log in with OAuth 2", chromedp.Click(chromedp.ID("login-oauth")))
	if got := text("#whoami b"); got != "ui-user" {
		t.Fatalf("after the OAuth 2 login, user %q, want ui-user", got)
	}
	if n := p.pkceOK.Load(); n != 1 {
		t.Fatalf("token endpoint saw %d requests with a matching PKCE verifier, want 1", n)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(loc, "code=") {
		t.Fatalf("the code stays in the address bar: %s", loc)
	}
	// The console works with the token: an administrator sees the users.
	do("users page", chromedp.Navigate(base+"/#/admin"), chromedp.WaitVisible(chromedp.CSS(`#view table`)))

	// A pasted token.
	do("log out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("login-token")))
	do("paste a token", chromedp.SetValue(chromedp.ID("login-token"), p.token("pasted", time.Hour, "rabbitmq.tag:management", "rabbitmq.read:*/*")),
		chromedp.Click(chromedp.ID("login-token-submit")))
	if got := text("#whoami b"); got != "pasted" {
		t.Fatalf("after pasting a token, user %q, want pasted", got)
	}

	// A forged token is refused, with the reason.
	do("log out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("login-token")))
	do("paste a forged token", chromedp.SetValue(chromedp.ID("login-token"), p.forged("pasted", time.Hour, "rabbitmq.tag:management")),
		chromedp.Click(chromedp.ID("login-token-submit")))
	if msg := text("#login-error .alert"); !strings.Contains(msg, "Token refused") || !strings.Contains(msg, "bad_signature") {
		t.Fatalf("login error %q", msg)
	}
}
