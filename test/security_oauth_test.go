package test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestSecurityF14ScopeClaimEscaped: a claim value expanded into a scope
// pattern matches only literally. A token whose sub (or client_id) is "*"
// with the scope read:%2F/q-{sub} reaches the queue named "q-*" and not
// "q-other" (issue 38, F14).
func TestSecurityF14ScopeClaimEscaped(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)

	// The administrator makes both queues and puts a message in each.
	admin := dial(t, b.URL)
	ach := newChannel(t, admin)
	must(t, ach.Confirm(false))
	for _, q := range []string{"q-*", "q-other"} {
		if _, err := ach.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		dc, err := ach.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
			amqp.Publishing{Body: []byte("in " + q)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("not confirmed: %v", err)
		}
	}

	for name, claims := range map[string]map[string]any{
		"sub":       p.claims("*", time.Hour, "rabbitmq.read:%2F/q-{sub}"),
		"client_id": p.claims("app", time.Hour, "rabbitmq.read:%2F/q-{client_id}"),
	} {
		t.Run(name, func(t *testing.T) {
			claims["client_id"] = "*"
			tok := p.signClaims(p.signingKey(), claims)
			c := dial(t, "amqp://whoever:"+tok+"@"+b.Addr+"/")
			ch := newChannel(t, c)
			if _, _, err := ch.Get("q-*", false); err != nil {
				t.Fatalf("get from q-*, which the scope names: %v", err)
			}
			ch = newChannel(t, c)
			user := "user '" + claims["sub"].(string) + "'"
			channelError(t, c, ch, 403, "ACCESS_REFUSED - read access to queue 'q-other' in vhost '/' refused for "+user, func() error {
				_, _, err := ch.Get("q-other", false)
				return err
			})
		})
	}
}
