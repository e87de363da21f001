package web

import (
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// /metrics/detailed serves the metric families a scrape asks for, as
// RabbitMQ's does: family= (repeatable) names them, vhost= (repeatable)
// keeps the per-queue ones of those vhosts only. Without family= it
// serves only rabbitmq_identity_info. RabbitMQ's names carry the prefix
// rabbitmq_detailed_; Trident's own keep theirs.
//
// Families: connection_churn_metrics, queue_coarse_metrics (with
// trident_queue_head_message_age_seconds), queue_consumer_count,
// queue_metrics, ra_metrics (Trident's Raft series, summed by group
// kind), stream_consumer_metrics (Trident: trident_stream_consumer_lag_messages).
var detailedFamilies = []string{"connection_churn_metrics", "queue_coarse_metrics", "queue_consumer_count",
	"queue_metrics", "ra_metrics", "stream_consumer_metrics"}

func (m *Metrics) detailed(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fams := map[string]bool{}
	for _, f := range q["family"] {
		if !slices.Contains(detailedFamilies, f) {
			http.Error(w, "unknown metric family "+f, http.StatusBadRequest)
			return
		}
		fams[f] = true
	}
	if fams["queue_metrics"] {
		delete(fams, "queue_consumer_count") // a subset of queue_metrics, as RabbitMQ
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&detailedCollector{c: coreCollector{opts: m.opts}, fams: fams, vhosts: q["vhost"]})
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

type detailedCollector struct {
	c      coreCollector
	fams   map[string]bool
	vhosts []string // empty: all
}

func ddesc(name, help string, labels ...string) *prometheus.Desc {
	return desc("rabbitmq_detailed_"+name, help, labels...)
}

var (
	dIdentity   = ddesc("identity_info", "RabbitMQ node & cluster identity info", "rabbitmq_node", "rabbitmq_cluster", "rabbitmq_endpoint")
	dConnOpened = ddesc("connections_opened_total", "Total number of connections opened")
	dConnClosed = ddesc("connections_closed_total", "Total number of connections closed or terminated")
	dChOpened   = ddesc("channels_opened_total", "Total number of channels opened")
	dChClosed   = ddesc("channels_closed_total", "Total number of channels closed")
	dQDeclared  = ddesc("queues_declared_total", "Total number of queues declared")
	dQCreated   = ddesc("queues_created_total", "Total number of queues created")
	dQDeleted   = ddesc("queues_deleted_total", "Total number of queues deleted")

	dQReady      = ddesc("queue_messages_ready", "Messages ready to be delivered to consumers", "vhost", "queue")
	dQUnacked    = ddesc("queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged", "vhost", "queue")
	dQMessages   = ddesc("queue_messages", "Sum of ready and unacknowledged messages - total queue depth", "vhost", "queue")
	dQConsumers  = ddesc("queue_consumers", "Consumers on a queue", "vhost", "queue")
	dQMemory     = ddesc("queue_process_memory_bytes", "Memory in bytes the queue holds (Trident: bodies and message headers in memory)", "vhost", "queue")
	dQRAM        = ddesc("queue_messages_ram", "Ready and unacknowledged messages stored in memory", "vhost", "queue")
	dQReadyRAM   = ddesc("queue_messages_ready_ram", "Ready messages stored in memory", "vhost", "queue")
	dQUnackedRAM = ddesc("queue_messages_unacked_ram", "Unacknowledged messages stored in memory", "vhost", "queue")
	dQReadyBytes = ddesc("queue_messages_ready_bytes", "Size in bytes of ready messages", "vhost", "queue")
	dQPaged      = ddesc("queue_messages_paged_out", "Messages paged out to disk", "vhost", "queue")
	dQPagedBytes = ddesc("queue_messages_paged_out_bytes", "Size in bytes of messages paged out to disk", "vhost", "queue")
)

func (d *detailedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- dIdentity }

func (d *detailedCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(ds *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(ds, prometheus.GaugeValue, v, l...)
	}
	count := func(ds *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(ds, prometheus.CounterValue, float64(v))
	}
	o := d.c.opts
	gauge(dIdentity, 1, o.Node, o.Node, "detailed")
	if d.fams["connection_churn_metrics"] {
		if b, ok := o.Core.(churner); ok {
			s := b.Churn().Stats()
			var opened, closed uint64
			for _, n := range s.ConnectionsOpened {
				opened += n
			}
			for _, n := range s.ConnectionsClosed {
				closed += n
			}
			count(dConnOpened, opened)
			count(dConnClosed, closed)
			count(dChOpened, s.ChannelsOpened)
			count(dChClosed, s.ChannelsClosed)
			count(dQDeclared, s.QueuesDeclared)
			count(dQCreated, s.QueuesCreated)
			count(dQDeleted, s.QueuesDeleted)
		}
	}
	if d.fams["ra_metrics"] {
		d.c.collectRaft(ch)
	}
	perQueue := d.fams["queue_coarse_metrics"] || d.fams["queue_consumer_count"] || d.fams["queue_metrics"] || d.fams["stream_consumer_metrics"]
	if !perQueue {
		return
	}
	now := time.Now()
	for _, vn := range o.Core.VHosts() {
		if len(d.vhosts) > 0 && !slices.Contains(d.vhosts, vn) {
			continue
		}
		v, ok := o.Core.VHost(vn)
		if !ok {
			continue
		}
		for _, q := range v.Queues() {
			st := q.Status()
			l := []string{vn, q.Name()}
			if d.fams["queue_coarse_metrics"] {
				gauge(dQReady, float64(st.Ready), l...)
				gauge(dQUnacked, float64(st.Unacked), l...)
				gauge(dQMessages, float64(st.Ready+st.Unacked), l...)
				if age, ok := headAge(st, now); ok || st.Ready == 0 {
					gauge(mHeadAge, age, l...)
				}
			}
			if d.fams["queue_consumer_count"] || d.fams["queue_metrics"] {
				gauge(dQConsumers, float64(st.Consumers), l...)
			}
			if d.fams["queue_metrics"] {
				gauge(dQMemory, float64(st.Memory), l...)
				gauge(dQRAM, float64(st.ReadyRAM+st.Unacked), l...)
				gauge(dQReadyRAM, float64(st.ReadyRAM), l...)
				gauge(dQUnackedRAM, float64(st.Unacked), l...)
				gauge(dQReadyBytes, float64(st.ReadyBytes), l...)
				gauge(dQPaged, float64(st.Ready-st.ReadyRAM), l...)
				gauge(dQPagedBytes, float64(st.ReadyBytes-st.BytesRAM), l...)
			}
			if d.fams["stream_consumer_metrics"] {
				streamLags(q, func(consumer string, lag int64) { gauge(mStreamLag, float64(lag), vn, q.Name(), consumer) })
			}
		}
	}
}
