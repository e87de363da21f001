package web

import (
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// The latency histograms of a vhost (exchange/latency.go) as JSON, a
// Trident extension for the UI and for scripts that cannot scrape
// /metrics:
//
//	GET /api/latency            every vhost the user sees
//	GET /api/latency/{vhost}    one vhost (401 without access to it)
//
// Each entry is one histogram that observed something, since the node
// started: {"vhost", "protocol", "metric" (publish_to_confirm,
// enqueue_to_deliver, deliver_to_ack), "count", "sum_seconds",
// "mean_seconds", "p50_seconds", "p90_seconds", "p99_seconds" (estimated
// from the classic buckets as Prometheus' histogram_quantile does: linear
// within the bucket; the top bound when past it), "buckets" (cumulative
// counts per upper bound "le", so that a client can take the difference
// of two readings for a recent window)}.

type latencyBucketJSON struct {
	LE    float64 `json:"le"`
	Count uint64  `json:"count"`
}

type latencyJSON struct {
	VHost    string              `json:"vhost"`
	Protocol string              `json:"protocol"`
	Metric   string              `json:"metric"`
	Count    uint64              `json:"count"`
	Sum      float64             `json:"sum_seconds"`
	Mean     float64             `json:"mean_seconds"`
	P50      float64             `json:"p50_seconds"`
	P90      float64             `json:"p90_seconds"`
	P99      float64             `json:"p99_seconds"`
	Buckets  []latencyBucketJSON `json:"buckets"`
}

var latencyMetricNames = [...]string{
	exchange.LatPublishConfirm: "publish_to_confirm",
	exchange.LatEnqueueDeliver: "enqueue_to_deliver",
	exchange.LatDeliverAck:     "deliver_to_ack",
}

// bucketQuantile estimates quantile q of a histogram from its cumulative
// classic bucket counts over bounds, as histogram_quantile does.
func bucketQuantile(q float64, bounds []float64, cum []uint64, count uint64) float64 {
	if count == 0 || len(bounds) == 0 {
		return 0
	}
	rank := q * float64(count)
	var prevCount uint64
	for i, b := range bounds {
		if i >= len(cum) {
			break
		}
		if float64(cum[i]) >= rank {
			lower := 0.0
			if i > 0 {
				lower = bounds[i-1]
			}
			in := cum[i] - prevCount
			if in == 0 {
				return b
			}
			return lower + (b-lower)*(rank-float64(prevCount))/float64(in)
		}
		prevCount = cum[i]
	}
	return bounds[len(bounds)-1] // in the +Inf bucket: the top bound
}

func latenciesOf(v *exchange.VHost) []latencyJSON {
	out := []latencyJSON{}
	v.Latencies(func(p exchange.Protocol, k exchange.Latency, h exchange.HistogramSnapshot) {
		if h.Count == 0 || int(k) >= len(latencyMetricNames) {
			return
		}
		j := latencyJSON{VHost: v.Name(), Protocol: p.String(), Metric: latencyMetricNames[k], Count: h.Count,
			Sum: h.Sum, Mean: h.Sum / float64(h.Count), Buckets: make([]latencyBucketJSON, 0, len(h.Classic))}
		j.P50 = bucketQuantile(0.5, exchange.ClassicBounds, h.Classic, h.Count)
		j.P90 = bucketQuantile(0.9, exchange.ClassicBounds, h.Classic, h.Count)
		j.P99 = bucketQuantile(0.99, exchange.ClassicBounds, h.Classic, h.Count)
		for i, c := range h.Classic {
			if i < len(exchange.ClassicBounds) {
				j.Buckets = append(j.Buckets, latencyBucketJSON{LE: exchange.ClassicBounds[i], Count: c})
			}
		}
		out = append(out, j)
	})
	return out
}

func (s *Server) listLatencies(w http.ResponseWriter, _ *http.Request, u *auth.User) {
	out := []latencyJSON{}
	for _, v := range s.visibleVHosts(u) {
		out = append(out, latenciesOf(v)...)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) vhostLatencies(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, latenciesOf(v))
}
