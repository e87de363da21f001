package test

import (
	"net/http"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

func TestMetricsHeadMessageAge(t *testing.T) {
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	murl := "http://" + b.n.MetricsAddr().String()
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("aged", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Empty: no head, so no timestamp and no age.
	q := a.object("/api/queues/%2F/aged")
	if q["head_message_timestamp"] != nil || q["head_message_age_seconds"] != nil {
		t.Fatalf("empty queue: head %v, age %v", q["head_message_timestamp"], q["head_message_age_seconds"])
	}
	// The timestamp property says a day ago; the age is the time waited here.
	ts := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	if err := ch.Publish("", "aged", false, false, amqp.Publishing{Body: []byte("x"), Timestamp: ts}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "aged", false, false, amqp.Publishing{Body: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	q = a.object("/api/queues/%2F/aged")
	if got, ok := q["head_message_timestamp"].(float64); !ok || int64(got) != ts.Unix() {
		t.Fatalf("head_message_timestamp %v, want %d", q["head_message_timestamp"], ts.Unix())
	}
	age1, ok := q["head_message_age_seconds"].(float64)
	if !ok || age1 < 0.3 || age1 > 3600 {
		t.Fatalf("head_message_age_seconds %v, want ≥ 0.3 and not the timestamp's day", q["head_message_age_seconds"])
	}
	per := value(scrape(t, murl+"/metrics/per-object"), "trident_queue_head_message_age_seconds", "vhost", "/", "queue", "aged")
	if per < 0.3 {
		t.Fatalf("per-object head age %v", per)
	}
	if agg := value(scrape(t, murl+"/metrics"), "trident_queue_head_message_age_seconds"); agg < per {
		t.Fatalf("/metrics head age (the oldest) %v < the queue's %v", agg, per)
	}
	time.Sleep(200 * time.Millisecond)
	if age2 := a.object("/api/queues/%2F/aged")["head_message_age_seconds"].(float64); age2 < age1+0.2 {
		t.Fatalf("head age did not grow: %v then %v", age1, age2)
	}
	// Taking the head makes the next message the head: no timestamp.
	if _, ok, err := ch.Get("aged", true); !ok || err != nil {
		t.Fatalf("get: %v %v", ok, err)
	}
	if q := a.object("/api/queues/%2F/aged"); q["head_message_timestamp"] != nil || q["head_message_age_seconds"] == nil {
		t.Fatalf("after get: head %v, age %v", q["head_message_timestamp"], q["head_message_age_seconds"])
	}
}

func TestMetricsDetailed(t *testing.T) {
	b, _ := mgmtBroker(t)
	murl := "http://" + b.n.MetricsAddr().String() + "/metrics/detailed"
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("dq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := ch.Publish("", "dq", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclarePassive("dq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// No family: only the identity, as RabbitMQ.
	fams := scrape(t, murl)
	if len(fams) != 1 || fams["rabbitmq_detailed_identity_info"] == nil {
		t.Fatalf("no family asked: %d families", len(fams))
	}
	fams = scrape(t, murl+"?family=queue_coarse_metrics&vhost=%2F")
	if v := value(fams, "rabbitmq_detailed_queue_messages_ready", "vhost", "/", "queue", "dq"); v != 3 {
		t.Fatalf("rabbitmq_detailed_queue_messages_ready %v, want 3", v)
	}
	if v := value(fams, "trident_queue_head_message_age_seconds", "vhost", "/", "queue", "dq"); v < 0 {
		t.Fatal("no head age in queue_coarse_metrics")
	}
	if fams["rabbitmq_detailed_queue_consumers"] != nil {
		t.Fatal("queue_consumer_count served without being asked")
	}
	// vhost= keeps that vhost's queues only.
	if fams := scrape(t, murl+"?family=queue_coarse_metrics&vhost=other"); fams["rabbitmq_detailed_queue_messages_ready"] != nil {
		t.Fatal("vhost=other served the queues of /")
	}
	fams = scrape(t, murl+"?family=queue_metrics&family=connection_churn_metrics")
	if v := value(fams, "rabbitmq_detailed_queue_consumers", "vhost", "/", "queue", "dq"); v != 0 {
		t.Fatalf("queue_consumers %v", v)
	}
	if v := value(fams, "rabbitmq_detailed_connections_opened_total"); v < 1 {
		t.Fatalf("connections_opened_total %v", v)
	}
	if v := value(fams, "rabbitmq_detailed_queues_declared_total"); v < 1 {
		t.Fatalf("queues_declared_total %v", v)
	}
	resp, err := http.Get(murl + "?family=no_such_family")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown family: %d", resp.StatusCode)
	}
	// The same access rule as /metrics (RabbitMQ's): the Prometheus
	// listener asks no credentials, and the management API does not
	// serve the metrics at all.
	base := "http://" + b.n.HTTPAddr().String()
	for _, u := range []string{base + "/metrics/detailed?family=queue_coarse_metrics", base + "/metrics"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("%s served on the management listener", u)
		}
	}
}

func TestMetricsChurnAndUnroutable(t *testing.T) {
	b, _ := mgmtBroker(t)
	murl := "http://" + b.n.MetricsAddr().String() + "/metrics"
	before := scrape(t, murl)
	c := dial(t, b.URL)
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	// One unroutable publish returned (mandatory), two dropped.
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	if err := ch.Publish("", "nowhere", true, false, amqp.Publishing{Body: []byte("r")}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := ch.Publish("", "nowhere", false, false, amqp.Publishing{Body: []byte("d")}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-returns:
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.return")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fams := scrape(t, murl)
		d := func(name string, l ...string) float64 {
			return value(fams, name, l...) - max(value(before, name, l...), 0)
		}
		ok := d("rabbitmq_connections_opened_total") == 1 && d("rabbitmq_connections_closed_total") == 1 &&
			d("trident_connections_opened_total", "protocol", "amqp091") == 1 &&
			d("rabbitmq_channels_opened_total") == 1 && d("rabbitmq_channels_closed_total") == 1 &&
			d("rabbitmq_queues_declared_total") == 1 && d("rabbitmq_queues_created_total") == 1 && d("rabbitmq_queues_deleted_total") == 1
		if ok {
			if r, dr := d("rabbitmq_channel_messages_unroutable_returned_total"), d("rabbitmq_channel_messages_unroutable_dropped_total"); r != 1 || dr != 2 {
				t.Fatalf("unroutable returned %v dropped %v, want 1 and 2", r, dr)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("churn: connections %v/%v, channels %v/%v, queues %v/%v/%v",
				d("rabbitmq_connections_opened_total"), d("rabbitmq_connections_closed_total"),
				d("rabbitmq_channels_opened_total"), d("rabbitmq_channels_closed_total"),
				d("rabbitmq_queues_declared_total"), d("rabbitmq_queues_created_total"), d("rabbitmq_queues_deleted_total"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The alarm gauges follow the node's alarms, and the limits are the
// configured ones.
func TestMetricsAlarms(t *testing.T) {
	b, _ := mgmtBroker(t, func(c *conf.Config) {
		c.MemoryHighWatermarkBytes = 1 << 20
		c.DiskFreeLimit = 1 << 62 // more than any disk has free
	})
	murl := "http://" + b.n.MetricsAddr().String() + "/metrics"
	deadline := time.Now().Add(15 * time.Second)
	for {
		fams := scrape(t, murl)
		mem, disk := value(fams, "rabbitmq_alarms_memory_used_watermark"), value(fams, "rabbitmq_alarms_free_disk_space_watermark")
		if mem == 1 && disk == 1 && value(fams, "trident_alarm", "alarm", "memory") == 1 && value(fams, "trident_alarm", "alarm", "disk") == 1 {
			if v := value(fams, "rabbitmq_resident_memory_limit_bytes"); v != 1<<20 {
				t.Fatalf("memory limit %v", v)
			}
			if v := value(fams, "rabbitmq_disk_space_available_limit_bytes"); v != 1<<62 {
				t.Fatalf("disk limit %v", v)
			}
			if value(fams, "rabbitmq_process_resident_memory_bytes") <= 0 || value(fams, "rabbitmq_process_open_fds") <= 0 {
				t.Fatal("no resident memory or open file descriptors")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alarms: memory %v disk %v", mem, disk)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Without alarms the gauges are 0.
	b2, _ := mgmtBroker(t)
	fams := scrape(t, "http://"+b2.n.MetricsAddr().String()+"/metrics")
	if value(fams, "rabbitmq_alarms_memory_used_watermark") != 0 || value(fams, "trident_alarm", "alarm", "disk") != 0 {
		t.Fatal("an alarm shows raised on a node without one")
	}
}
