package test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestUISuperStream: a super stream's exchange page lists its partitions
// in their order with leader, messages and last offset, the active
// consumer of a single-active group on each, and the group's stored
// offset and lag on every partition (issue 41: "the UI shows a super
// stream with its partitions, their leaders and consumer-group
// positions").
func TestUISuperStream(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(http.StatusCreated, "PUT", "/api/exchanges/%2F/orders", map[string]any{"type": "direct", "durable": true,
		"arguments": map[string]any{"x-super-stream": true}})
	parts := []string{"orders-0", "orders-1", "orders-2"}
	for i, p := range parts {
		api.expect(http.StatusCreated, "PUT", "/api/queues/%2F/"+p, map[string]any{"durable": true,
			"arguments": map[string]any{"x-queue-type": "stream"}})
		api.expect(http.StatusCreated, "POST", "/api/bindings/%2F/e/orders/q/"+p, map[string]any{"routing_key": p[len("orders-"):],
			"arguments": map[string]any{"x-stream-partition-order": i}})
	}
	_, pub := channel(t, b.URL)
	streamPublish(t, pub, "orders", "0", numbered("a-", 0, 5), nil)
	streamPublish(t, pub, "orders", "1", numbered("b-", 0, 3), nil)
	// Group "app": single active on orders-0 and orders-1, acked 4 of
	// orders-0 (stored offset 3, lag 1) and all 3 of orders-1; a second
	// member of orders-0 waits.
	sac := func(offsetName string) amqp.Table {
		return amqp.Table{"x-stream-offset": "first", "x-stream-consumer-name": offsetName, "x-single-active-consumer": true}
	}
	_, d0 := consumeStream(t, b.URL, "orders-0", 4, sac("app"))
	takeStream(t, d0, 4)
	consumeStream(t, b.URL, "orders-0", 4, sac("app"))
	_, d1 := consumeStream(t, b.URL, "orders-1", 10, sac("app"))
	takeStream(t, d1, 3)
	eventually(t, 10*time.Second, "app's offsets to be stored", func() bool {
		q := api.object("/api/queues/%2F/orders-0")
		st, _ := q["stream"].(map[string]any)
		cs, _ := st["consumer_offsets"].([]any)
		return len(cs) == 1
	})

	u := openUIOps(t, base, 1366, 900)
	u.open("#/exchanges/%2F/orders", "#super-partitions tbody tr")
	var rows []string
	eventually(t, 20*time.Second, "three partition rows", func() bool {
		rows = u.texts("#super-partitions tbody tr")
		return len(rows) == 3 && strings.Contains(u.text("#super-groups tbody"), "app")
	})
	node := api.object("/api/overview")["node"].(string)
	for i, want := range []struct{ name, messages, last string }{{"orders-0", "5", "4"}, {"orders-1", "3", "2"}, {"orders-2", "0", "—"}} {
		cells := u.texts(`#super-partitions tbody tr:nth-child(` + string(rune('1'+i)) + `) td`)
		if len(cells) != 7 || cells[1] != want.name || cells[2] != node || cells[4] != want.messages || cells[5] != want.last {
			t.Errorf("partition row %d: %q, want %s led by %s with %s messages, last offset %s", i, cells, want.name, node, want.messages, want.last)
		}
		if active := cells[6]; (i < 2) == (active == "—" || active == "") {
			t.Errorf("partition %s: active consumer %q", want.name, active)
		}
	}
	groups := u.texts("#super-groups tbody tr td")
	if len(groups) != 4 || groups[0] != "app" || !strings.HasPrefix(groups[1], "3") || !strings.Contains(groups[1], "lag 1") ||
		!strings.Contains(groups[1], "attached") || !strings.HasPrefix(groups[2], "2") || !strings.Contains(groups[2], "lag 0") || groups[3] != "—" {
		t.Errorf("group row %q, want app at 3 (lag 1) on orders-0, 2 (lag 0) on orders-1, nothing on orders-2", groups)
	}
	u.shot("super-stream")

	// A plain exchange has no such panel.
	u.open("#/exchanges/%2F/amq.direct", "#exchange-bindings")
	hidden, err := chromedp.Run(u.ctx, chromedp.Evaluate[bool](`(() => { const e = document.querySelector('#super-stream'); return !e || e.hidden })()`))
	if err != nil || !hidden {
		t.Errorf("the super stream panel shows on amq.direct (%v)", err)
	}
}
