package web

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/trident-broker/trident/exchange"
)

// The latency histograms (exchange/latency.go), per vhost and protocol,
// on /metrics and /metrics/per-object. Each carries classic buckets (the
// text format) and a native histogram of schema 2 (a scrape that asks for
// protobuf sees both).
var latencyDescs = [...]*prometheus.Desc{
	exchange.LatPublishConfirm: desc("trident_publish_to_confirm_seconds", "Time from the broker accepting a publish that asked for a confirm (AMQP publisher confirm, MQTT QoS 1 PUBACK / QoS 2 PUBREC, STOMP receipt) to its outcome being known", "vhost", "protocol"),
	exchange.LatEnqueueDeliver: desc("trident_enqueue_to_deliver_seconds", "Time a message waited in a queue until its first delivery to a consumer or by get", "vhost", "protocol"),
	exchange.LatDeliverAck:     desc("trident_deliver_to_ack_seconds", "Time from a delivery that needs an acknowledgement to its acknowledgement", "vhost", "protocol"),
}

// collectLatencies sends every vhost's histograms that observed anything.
func collectLatencies(core Core, ch chan<- prometheus.Metric) {
	for _, vn := range core.VHosts() {
		v, ok := core.VHost(vn)
		if !ok {
			continue
		}
		v.Latencies(func(p exchange.Protocol, k exchange.Latency, h exchange.HistogramSnapshot) {
			if h.Count == 0 {
				return
			}
			ch <- &histMetric{d: latencyDescs[k], labels: prometheus.MakeLabelPairs(latencyDescs[k], []string{vn, p.String()}), h: h}
		})
	}
}

// histMetric is one histogram snapshot with classic and native buckets.
type histMetric struct {
	d      *prometheus.Desc
	labels []*dto.LabelPair
	h      exchange.HistogramSnapshot
}

func (m *histMetric) Desc() *prometheus.Desc { return m.d }

func (m *histMetric) Write(out *dto.Metric) error {
	h := &dto.Histogram{
		SampleCount:   proto.Uint64(m.h.Count),
		SampleSum:     proto.Float64(m.h.Sum),
		Schema:        proto.Int32(exchange.NativeSchema),
		ZeroThreshold: proto.Float64(exchange.NativeZeroThreshold),
		ZeroCount:     proto.Uint64(m.h.ZeroCount),
	}
	for i, b := range exchange.ClassicBounds {
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(m.h.Classic[i])})
	}
	if n := len(m.h.Native); n > 0 {
		// One span over the buckets, delta-encoded (empty ones inside
		// count as 0).
		h.PositiveSpan = []*dto.BucketSpan{{Offset: proto.Int32(m.h.NativeOffset), Length: proto.Uint32(uint32(n))}}
		var prev int64
		for _, c := range m.h.Native {
			h.PositiveDelta = append(h.PositiveDelta, int64(c)-prev)
			prev = int64(c)
		}
	}
	out.Label = m.labels
	out.Histogram = h
	return nil
}
