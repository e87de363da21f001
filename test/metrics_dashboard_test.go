package test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// rabbitOverviewNames are the metric names the queries of RabbitMQ's own
// "RabbitMQ-Overview" Grafana dashboard (rabbitmq-server,
// deps/rabbitmq_prometheus/docker/grafana/dashboards) use: they must
// exist so that the dashboard works against Trident unchanged.
var rabbitOverviewNames = []string{
	"rabbitmq_identity_info", "rabbitmq_build_info",
	"rabbitmq_queue_messages_ready", "rabbitmq_queue_messages_unacked", "rabbitmq_queue_messages_published_total",
	"rabbitmq_connections", "rabbitmq_channels", "rabbitmq_queues", "rabbitmq_channel_consumers",
	"rabbitmq_channel_messages_published_total", "rabbitmq_channel_messages_confirmed_total", "rabbitmq_channel_messages_unconfirmed",
	"rabbitmq_channel_messages_unroutable_dropped_total", "rabbitmq_channel_messages_unroutable_returned_total",
	"rabbitmq_channel_messages_delivered_total", "rabbitmq_channel_messages_delivered_ack_total",
	"rabbitmq_channel_messages_redelivered_total", "rabbitmq_channel_messages_acked_total",
	"rabbitmq_channel_get_total", "rabbitmq_channel_get_ack_total", "rabbitmq_channel_get_empty_total",
	"rabbitmq_resident_memory_limit_bytes", "rabbitmq_process_resident_memory_bytes", "rabbitmq_disk_space_available_bytes",
	"rabbitmq_process_max_fds", "rabbitmq_process_open_fds", "rabbitmq_process_max_tcp_sockets", "rabbitmq_process_open_tcp_sockets",
	"rabbitmq_queues_declared_total", "rabbitmq_queues_created_total", "rabbitmq_queues_deleted_total",
	"rabbitmq_channels_opened_total", "rabbitmq_channels_closed_total",
	"rabbitmq_connections_opened_total", "rabbitmq_connections_closed_total",
}

// dashboardNames are the metric names deploy/grafana/*.json query.
func dashboardNames(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct{ Query any } `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	re := regexp.MustCompile(`\b(?:rabbitmq|trident)_[a-z_]+\b`)
	seen := map[string]bool{}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if s, ok := v.Query.(string); ok {
			exprs = append(exprs, s)
		}
	}
	for _, e := range exprs {
		for _, n := range re.FindAllString(e, -1) {
			seen[n] = true
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	if len(out) < 20 {
		t.Fatalf("%s: only %d metric names in its queries: %v", path, len(out), out)
	}
	return out
}

// exists reports whether name is a family of fams, or the _bucket,
// _count or _sum series of a histogram family.
func exists(fams map[string]*dto.MetricFamily, name string) bool {
	if f := fams[name]; f != nil && len(f.Metric) > 0 {
		return true
	}
	for _, suf := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f := fams[base]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM && len(f.Metric) > 0 {
				return true
			}
		}
	}
	return false
}

// startClusteredMetricsBroker is an in-process node that forms a cluster
// of one (so that it has Raft groups), with the management API and
// Prometheus listeners.
func startClusteredMetricsBroker(t *testing.T) *broker {
	rp, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := mgmtBroker(t, func(c *conf.Config) {
		c.Cluster.NodeName = "trident-dash@localhost"
		c.Cluster.GossipListen = net.JoinHostPort("127.0.0.1", strconv.Itoa(freeTCPUDPPort(t)))
		c.Cluster.RaftListen = net.JoinHostPort("127.0.0.1", strconv.Itoa(rp))
		c.Cluster.Cookie = "dashboard-cookie"
	})
	return b
}

func TestMetricsDashboardQueriesExist(t *testing.T) {
	b := startClusteredMetricsBroker(t)
	murl := "http://" + b.n.MetricsAddr().String()
	_, ch := channel(t, b.URL)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// A little traffic of every kind the dashboard shows: a classic and a
	// quorum queue with confirms, manual acks, and a stream read by a
	// named consumer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := ch.QueueDeclare("dash-qq", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("declare quorum queue: %v", err)
		}
		_, ch = channel(t, b.URL) // the cluster of one may still be forming
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, q := range []struct {
		name string
		args amqp.Table
	}{{"dash-classic", nil}, {"dash-stream", amqp.Table{"x-queue-type": "stream"}}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			t.Fatalf("declare %s: %v", q.name, err)
		}
	}
	for _, q := range []string{"dash-qq", "dash-classic", "dash-stream"} {
		for i := 0; i < 3; i++ {
			c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
				amqp.Publishing{Body: []byte("m"), DeliveryMode: amqp.Persistent})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			ok, err := c.WaitContext(ctx)
			cancel()
			if !ok || err != nil {
				t.Fatalf("confirm to %s: %v %v", q, ok, err)
			}
		}
	}
	_, cch := channel(t, b.URL)
	if err := cch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"dash-qq", "dash-classic"} {
		ds, err := cch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if err := receive(t, ds).Ack(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	ds, err := cch.Consume("dash-stream", "reader", false, false, false, false,
		amqp.Table{"x-stream-offset": "first", "x-stream-consumer-name": "reader"})
	if err != nil {
		t.Fatal(err)
	}
	if err := receive(t, ds).Ack(false); err != nil {
		t.Fatal(err)
	}

	all := map[string]*dto.MetricFamily{}
	merge := func(fams map[string]*dto.MetricFamily) {
		for n, f := range fams {
			if all[n] == nil {
				all[n] = f
			}
		}
	}
	want := append(dashboardNames(t, "../deploy/grafana/trident-overview.json"), rabbitOverviewNames...)
	var missing []string
	for {
		all = map[string]*dto.MetricFamily{}
		merge(scrape(t, murl+"/metrics"))
		merge(scrape(t, murl+"/metrics/per-object"))
		merge(scrape(t, murl+"/metrics/detailed?family=queue_coarse_metrics&family=stream_consumer_metrics&family=ra_metrics&family=connection_churn_metrics"))
		missing = missing[:0]
		for _, n := range want {
			if !exists(all, n) {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline.Add(15 * time.Second)) {
			t.Fatalf("metrics the dashboards query and no endpoint serves: %v", missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The manual lists every metric an endpoint served above.
	all = map[string]*dto.MetricFamily{}
	merge(scrape(t, murl+"/metrics"))
	merge(scrape(t, murl+"/metrics/per-object"))
	merge(scrape(t, murl+"/metrics/detailed?family=connection_churn_metrics&family=queue_coarse_metrics&family=queue_consumer_count&family=queue_metrics&family=ra_metrics&family=stream_consumer_metrics"))
	if m := undocumentedMetrics(t, all); len(m) > 0 {
		t.Errorf("metrics served but not in docs/monitoring.md: %v", m)
	}
	// The Raft series say what the node is: the metadata group, and one
	// group for the quorum queue and one for the stream (kind "queue"),
	// all led here, entries applied.
	for _, c := range []struct {
		name, kind string
		want       float64
	}{{"trident_raft_groups", "meta", 1}, {"trident_raft_groups", "queue", 2}, {"trident_raft_groups_led", "queue", 2}} {
		if v := value(all, c.name, "kind", c.kind); v != c.want {
			t.Errorf("%s{kind=%q} = %v, want %v", c.name, c.kind, v, c.want)
		}
	}
	if h := histogram(all, "trident_raft_apply_seconds"); h.GetSampleCount() == 0 {
		t.Errorf("trident_raft_apply_seconds observed nothing")
	}
	if v := value(all, "trident_stream_consumer_lag_messages", "queue", "dash-stream", "consumer", "reader"); v < 0 || v > 3 {
		t.Errorf("stream consumer lag %v, want 0..3", v)
	}
}

// undocumentedMetrics returns the metric families in fams that
// docs/monitoring.md does not name. The manual names a metric in
// backquotes, in full or as a suffix of the full name before it
// ("`rabbitmq_queue_messages`, `…_ready`"); `rabbitmq_detailed_X` is
// documented by `rabbitmq_X` (RabbitMQ's naming); the Go runtime's and
// the process's collectors (`go_*`, `process_*`) are named as a whole.
func undocumentedMetrics(t *testing.T, fams map[string]*dto.MetricFamily) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	var full string // the last name given in full
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(string(doc), -1) {
		tok := m[1]
		if i := strings.IndexAny(tok, "{ "); i > 0 {
			tok = tok[:i] // `trident_alarm{alarm}`
		}
		rest, short := strings.CutPrefix(tok, "…")
		if !short {
			rest, short = strings.CutPrefix(tok, "...")
		}
		if !short {
			if regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(tok) {
				named[tok] = true
				full = tok
			}
			continue
		}
		// A suffix: appended to the full name, or replacing as many of
		// its last words as it has, or anywhere a prefix of it ends.
		rest = strings.TrimPrefix(rest, "_")
		words := strings.Split(full, "_")
		for k := 0; k <= len(words); k++ {
			named[strings.Join(words[:k], "_")+"_"+rest] = true
		}
	}
	var missing []string
	for n := range fams {
		base := n
		if d, ok := strings.CutPrefix(n, "rabbitmq_detailed_"); ok {
			base = "rabbitmq_" + d
		}
		if named[n] || named[base] || strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
			continue
		}
		missing = append(missing, n)
	}
	sort.Strings(missing)
	return missing
}
