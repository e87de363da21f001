package test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestUIClusterBrowser drives the UI of a three-process cluster in headless
// Chromium: the Nodes page lists the three members as running and marks
// the one leading the metadata Raft group, and a quorum queue declared over
// AMQP shows its leader and its three members on the queues list and on
// its own page. Screenshots at 1366 and 1920 wide go to
// $TRIDENT_SCREENSHOTS (default: a temporary directory, named in the log).
func TestUIClusterBrowser(t *testing.T) {
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

	nodes := startCluster(t, 3)
	ui := nodes[0]

	// The metadata leader, as the API of the node the browser uses says.
	var metaLeader string
	eventually(t, 30*time.Second, "a metadata leader in /api/nodes", func() bool {
		var list []struct {
			Name       string `json:"name"`
			MetaLeader bool   `json:"meta_leader"`
		}
		if _, err := ui.tryAPI("GET", "/api/nodes", nil, &list); err != nil {
			return false
		}
		for _, n := range list {
			if n.MetaLeader {
				metaLeader = n.Name
			}
		}
		return metaLeader != ""
	})

	// A quorum queue declared on another node, with a few messages.
	const queue = "ui-quorum-orders"
	_, ch := dialNode(t, nodes[1])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("declare quorum queue: %v", err)
	}
	for i := range 3 {
		if err := ch.PublishWithContext(context.Background(), "", queue, false, false,
			amqp.Publishing{Body: fmt.Appendf(nil, "order %d", i)}); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	var qLeader string
	eventually(t, 30*time.Second, "the quorum queue's leader on "+ui.name, func() bool {
		qLeader = ui.queueLeader(t, "%2F/"+queue)
		return qLeader != ""
	})
	t.Logf("metadata leader %s, queue leader %s", metaLeader, qLeader)

	ctx := newBrowser(t, browser, 1366, 768)
	base := "http://" + ui.web
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			shot(t, ctx, shots, "failed-"+strings.NewReplacer(" ", "-", "/", "-").Replace(step))
			t.Fatalf("%s: %v", step, err)
		}
	}
	// until evaluates a JavaScript expression until it returns want.
	until := func(what, expr, want string) {
		t.Helper()
		var got string
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
			if got = v; err == nil && v == want {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Errorf("%s: got %q, want %q", what, got, want)
	}

	do("log in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("login-username")),
		chromedp.SendKeys(chromedp.ID("login-username"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-password"), "guest"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#node-info dd`)))

	// The Nodes page, reached from the navigation.
	do("open nodes", chromedp.Click(chromedp.CSS(`#nav a[data-nav="nodes"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#nodes-table tbody tr[data-node]`)))
	var want []string
	for _, nd := range nodes {
		want = append(want, nd.name+" running")
	}
	until("members and their state",
		`[...document.querySelectorAll('#nodes-table tbody tr')].map(tr => tr.dataset.node + ' ' + tr.querySelector('.state').innerText.trim()).sort().join(', ')`,
		strings.Join(want, ", "))
	until("the row marked as metadata leader",
		`[...document.querySelectorAll('#nodes-table tbody tr.meta-leader')].map(tr => tr.dataset.node + ' ' + tr.innerText.includes('leader')).join(', ')`,
		metaLeader+" true")
	until("the quorum queue's leader on the nodes page",
		`(document.querySelector('#quorum-table .node-chip.lead') || {dataset: {}}).dataset.node || ''`, qLeader)
	fits := func(page string) {
		t.Helper()
		until(page+": tables wider than their panel",
			`[...document.querySelectorAll('.table-wrap')].filter(w => w.scrollWidth > w.clientWidth + 1).map(w => w.parentElement.closest('[id]').id + ' ' + w.scrollWidth + '>' + w.clientWidth).join(', ')`, "")
	}
	fits("nodes")
	shot(t, ctx, shots, "cluster-01-nodes-1366")

	// The queues list: type, leader and members.
	do("open queues", chromedp.Click(chromedp.CSS(`#nav a[data-nav="queues"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#queues-table a[href="#/queues/%2F/`+queue+`"]`)))
	row := `[...document.querySelectorAll('#queues-table tbody tr')].find(tr => tr.querySelector('a[href$="/` + queue + `"]'))`
	until("queue type in the list", row+`.querySelector('.tag').innerText.trim()`, "quorum")
	until("queue leader in the list", row+`.querySelector('.node-chip.lead').dataset.node`, qLeader)
	until("queue members in the list", row+`.querySelectorAll('.chips .node-chip').length + ''`, "3")
	until("the leader first in the list", row+`.querySelector('.chips .node-chip').classList.contains('lead') + ''`, "true")
	fits("queues")
	shot(t, ctx, shots, "cluster-02-queues-1366")

	// The queue's page.
	do("open queue", chromedp.Navigate(base+"/#/queues/%2F/"+queue),
		chromedp.WaitVisible(chromedp.CSS(`#queue-leader .node-chip`)))
	until("leader on the queue page", `document.querySelector('#queue-leader .node-chip').dataset.node`, qLeader)
	var members []string
	for _, nd := range nodes {
		members = append(members, nd.name)
	}
	until("members on the queue page",
		`[...document.querySelectorAll('#queue-members .node-chip')].map(c => c.dataset.node).sort().join(',')`,
		strings.Join(members, ","))
	fits("queue")
	shot(t, ctx, shots, "cluster-03-queue-1366")
	do("overview", chromedp.Navigate(base+"/#/"), chromedp.WaitVisible(chromedp.CSS(`#node-info dd a[href="#/nodes"]`)))
	shot(t, ctx, shots, "cluster-04-overview-1366")

	// A member killed: the Nodes page says so, and its queue chip turns red.
	victim := nodes[2]
	if err := victim.p.Kill(); err != nil {
		t.Fatalf("kill %s: %v", victim.name, err)
	}
	do("open nodes after the kill", chromedp.Navigate(base+"/#/nodes"),
		chromedp.WaitVisible(chromedp.CSS(`#nodes-table tbody tr[data-node]`)))
	until("the killed member's state",
		`(() => { const tr = document.querySelector('#nodes-table tr[data-node="`+victim.name+`"]'); return tr ? tr.querySelector('.state').innerText.trim() : ''; })()`,
		"dead")
	until("the killed member's chip",
		`[...document.querySelectorAll('#quorum-table .chips .node-chip.down')].map(c => c.dataset.node).join(',')`, victim.name)
	shot(t, ctx, shots, "cluster-05-nodes-member-down-1366")

	// The same pages on a large screen.
	do("large screen", chromedp.EmulateViewport(1920, 1080))
	for _, p := range []struct{ name, hash, ready string }{
		{"cluster-06-nodes-1920", "#/nodes", `#nodes-table tr.meta-leader`},
		{"cluster-07-queues-1920", "#/queues", `#queues-table .node-chip.lead`},
		{"cluster-08-queue-1920", "#/queues/%2F/" + queue, `#queue-leader .node-chip`},
	} {
		do("open "+p.hash, chromedp.Navigate(base+"/"+p.hash), chromedp.WaitVisible(chromedp.CSS(p.ready)))
		shot(t, ctx, shots, p.name)
	}
}
