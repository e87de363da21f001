package test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	amqp "github.com/rabbitmq/amqp091-go"
)

// histogram returns the series of the histogram family name with the
// given labels (name, value pairs), or nil.
func histogram(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Histogram {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m.Histogram
	}
	return nil
}

// bucket is the cumulative count of h's classic bucket le.
func bucket(t *testing.T, h *dto.Histogram, le float64) uint64 {
	t.Helper()
	for _, b := range h.Bucket {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("no bucket le=%v", le)
	return 0
}

// waitHistogram scrapes url until the histogram has at least n
// observations, and returns it.
func waitHistogram(t *testing.T, url, name string, n uint64, labels ...string) *dto.Histogram {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		h := histogram(scrape(t, url), name, labels...)
		if h != nil && h.GetSampleCount() >= n {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v: %v, want %d observations", name, labels, h, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMetricsPublishToConfirm(t *testing.T) {
	b, _ := mgmtBroker(t)
	murl := "http://" + b.n.MetricsAddr().String() + "/metrics"
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("durable", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("transient", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// Persistent messages to a durable queue (confirmed once stored) and
	// transient ones (confirmed at once): each confirm is one observation.
	const n = 10
	var cs []*amqp.DeferredConfirmation
	for i := 0; i < n; i++ {
		for _, p := range []struct {
			q    string
			mode uint8
		}{{"durable", amqp.Persistent}, {"transient", amqp.Transient}} {
			c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", p.q, false, false,
				amqp.Publishing{Body: []byte("x"), DeliveryMode: p.mode})
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
	}
	for _, c := range cs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := c.WaitContext(ctx)
		cancel()
		if !ok || err != nil {
			t.Fatalf("confirm: %v %v", ok, err)
		}
	}
	h := histogram(scrape(t, murl), "trident_publish_to_confirm_seconds", "vhost", "/", "protocol", "amqp091")
	if h == nil || h.GetSampleCount() != 2*n {
		t.Fatalf("publish_to_confirm: %v, want %d observations (the confirms)", h, 2*n)
	}
	// A publish without confirms is not measured.
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	_, ch2 := channel(t, b.URL)
	if err := ch2.Publish("", "transient", false, false, amqp.Publishing{Body: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch2.QueueDeclarePassive("transient", false, false, false, false, nil); err != nil {
		t.Fatal(err) // a round trip: the publish was handled
	}
	if h := histogram(scrape(t, murl), "trident_publish_to_confirm_seconds", "vhost", "/", "protocol", "amqp091"); h.GetSampleCount() != 2*n {
		t.Fatalf("publish without confirm observed: %d", h.GetSampleCount())
	}
}

func TestMetricsEnqueueToDeliverAndAck(t *testing.T) {
	b, _ := mgmtBroker(t)
	murl := "http://" + b.n.MetricsAddr().String() + "/metrics"
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("held", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "held", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the message waits in the queue
	ds, err := ch.Consume("held", "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, ds)
	time.Sleep(200 * time.Millisecond) // then waits for its ack
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	l := []string{"vhost", "/", "protocol", "amqp091"}
	h := waitHistogram(t, murl, "trident_deliver_to_ack_seconds", 1, l...)
	if h.GetSampleCount() != 1 || h.GetSampleSum() < 0.2 || bucket(t, h, 0.1) != 0 {
		t.Fatalf("deliver_to_ack: %v", h)
	}
	h = histogram(scrape(t, murl), "trident_enqueue_to_deliver_seconds", l...)
	if h == nil || h.GetSampleCount() != 1 || h.GetSampleSum() < 0.3 || bucket(t, h, 0.25) != 0 {
		t.Fatalf("enqueue_to_deliver: %v, want one observation ≥ 0.3 s", h)
	}
	// A redelivery is not a first delivery: a requeued message adds
	// nothing to enqueue_to_deliver.
	if err := ch.Publish("", "held", false, false, amqp.Publishing{Body: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	d = receive(t, ds)
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	d = receive(t, ds)
	if !d.Redelivered {
		t.Fatal("not redelivered")
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	waitHistogram(t, murl, "trident_deliver_to_ack_seconds", 2, l...)
	if h := histogram(scrape(t, murl), "trident_enqueue_to_deliver_seconds", l...); h.GetSampleCount() != 2 {
		t.Fatalf("enqueue_to_deliver counts %d deliveries, want 2 first deliveries", h.GetSampleCount())
	}
	// The protobuf exposition carries the native histogram beside the
	// classic buckets.
	nh := histogram(scrapeProto(t, murl), "trident_enqueue_to_deliver_seconds", l...)
	if nh.GetSchema() != 2 || len(nh.PositiveSpan) == 0 {
		t.Fatalf("no native histogram: %v", nh)
	}
	var total int64
	var c int64
	for _, d := range nh.PositiveDelta {
		c += d
		total += c
	}
	if uint64(total)+nh.GetZeroCount() != nh.GetSampleCount() {
		t.Fatalf("native buckets hold %d+%d, count %d", total, nh.GetZeroCount(), nh.GetSampleCount())
	}
}

// scrapeProto scrapes url in the protobuf format (the one that carries
// native histograms).
func scrapeProto(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	fams := map[string]*dto.MetricFamily{}
	for {
		var f dto.MetricFamily
		if err := dec.Decode(&f); err == io.EOF {
			return fams
		} else if err != nil {
			t.Fatalf("decode %s: %v", url, err)
		}
		fams[f.GetName()] = &f
	}
}
