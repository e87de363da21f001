package web

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics serves Prometheus metrics with RabbitMQ's names (those of its
// rabbitmq_prometheus plugin): /metrics aggregated over the node, and
// /metrics/per-object with one series per queue (labels vhost, queue), as
// RabbitMQ does. Both add the Go runtime and process collectors. Values
// are read from the core at scrape time.
type Metrics struct {
	agg, per *prometheus.Registry
	opts     MetricsOptions
}

// NewMetrics creates the metrics over the core and the connections.
func NewMetrics(core Core, conns Connections, node, version string) *Metrics {
	return NewMetricsWith(MetricsOptions{Core: core, Conns: conns, Node: node, Version: version})
}

// NewMetricsWith creates the metrics with the node's resources, alarms
// and Raft groups as well (MetricsOptions).
func NewMetricsWith(o MetricsOptions) *Metrics {
	m := &Metrics{agg: prometheus.NewRegistry(), per: prometheus.NewRegistry(), opts: o}
	for _, reg := range []*prometheus.Registry{m.agg, m.per} {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m.agg.MustRegister(&coreCollector{opts: o})
	m.per.MustRegister(&coreCollector{opts: o, perObject: true})
	return m
}

// Handler serves /metrics, /metrics/per-object and /metrics/detailed.
// As RabbitMQ's prometheus plugin, none asks for credentials: the
// listener is the access control (bind it where only the scraper
// reaches it, or serve it over TLS with prometheus.tls_listen).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.agg, promhttp.HandlerOpts{}))
	mux.Handle("GET /metrics/per-object", promhttp.HandlerFor(m.per, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /metrics/detailed", m.detailed)
	return mux
}

type coreCollector struct {
	opts      MetricsOptions
	perObject bool
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	mIdentity    = desc("rabbitmq_identity_info", "RabbitMQ node & cluster identity info", "rabbitmq_node", "rabbitmq_cluster")
	mBuild       = desc("rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info", "rabbitmq_version", "product_name", "product_version")
	mConnections = desc("rabbitmq_connections", "Connections currently open")
	mChannels    = desc("rabbitmq_channels", "Channels currently open")
	mConsumers   = desc("rabbitmq_consumers", "Consumers currently connected")
	mQueues      = desc("rabbitmq_queues", "Queues available")

	mChPublished   = desc("rabbitmq_channel_messages_published_total", "Total number of messages published into an exchange on a channel")
	mChDelivered   = desc("rabbitmq_channel_messages_delivered_total", "Total number of messages delivered to consumers in automatic acknowledgement mode")
	mChDeliveredAk = desc("rabbitmq_channel_messages_delivered_ack_total", "Total number of messages delivered to consumers in manual acknowledgement mode")
	mChAcked       = desc("rabbitmq_channel_messages_acked_total", "Total number of messages acknowledged by consumers")
	mChRedelivered = desc("rabbitmq_channel_messages_redelivered_total", "Total number of messages redelivered to consumers")
	mChGet         = desc("rabbitmq_channel_get_total", "Total number of messages fetched with basic.get in automatic acknowledgement mode")
	mChGetAck      = desc("rabbitmq_channel_get_ack_total", "Total number of messages fetched with basic.get in manual acknowledgement mode")
	mChGetEmpty    = desc("rabbitmq_channel_get_empty_total", "Total number of times basic.get operations fetched no message")
	mChUnroutable  = desc("rabbitmq_channel_messages_unroutable_dropped_total", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable")

	mQReady       = qdesc("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers")
	mQUnacked     = qdesc("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged")
	mQMessages    = qdesc("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue depth")
	mQReadyBytes  = qdesc("rabbitmq_queue_messages_ready_bytes", "Size in bytes of ready messages")
	mQConsumers   = qdesc("rabbitmq_queue_consumers", "Consumers on a queue")
	mQPublished   = qdesc("rabbitmq_queue_messages_published_total", "Total number of messages published to queues")
	mQDelivered   = qdesc("rabbitmq_queue_messages_delivered_total", "Total number of messages delivered from the queue (Trident)")
	mQAcked       = qdesc("rabbitmq_queue_messages_acked_total", "Total number of messages acknowledged on the queue (Trident)")
	mQRedelivered = qdesc("rabbitmq_queue_messages_redelivered_total", "Total number of messages redelivered from the queue (Trident)")
	mQDropBehind  = qdesc("trident_queue_messages_dropped_behind_total", "Total number of transient messages dropped because the queue's at-most-once consumers were too far behind (MQTT QoS 0)")
)

// qmetric is a queue metric: without labels on /metrics (the sum over
// queues), with vhost and queue on /metrics/per-object.
type qmetric struct{ agg, per *prometheus.Desc }

func qdesc(name, help string) qmetric {
	return qmetric{agg: desc(name, help), per: desc(name, help, "vhost", "queue")}
}

var qmetrics = []qmetric{mQReady, mQUnacked, mQMessages, mQReadyBytes, mQConsumers, mQPublished, mQDelivered, mQAcked, mQRedelivered, mQDropBehind}

func (c *coreCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mIdentity, mBuild, mConnections, mChannels, mConsumers, mQueues,
		mChPublished, mChDelivered, mChDeliveredAk, mChAcked, mChRedelivered, mChGet, mChGetAck, mChGetEmpty, mChUnroutable} {
		ch <- d
	}
	for _, ds := range [][]*prometheus.Desc{latencyDescs[:], nodeDescs, raftDescs} {
		for _, d := range ds {
			ch <- d
		}
	}
	if c.perObject {
		ch <- mHeadAge
		ch <- mStreamLag
	} else {
		ch <- mHeadAgeMax
	}
	for _, q := range qmetrics {
		if c.perObject {
			ch <- q.per
		} else {
			ch <- q.agg
		}
	}
}

func (c *coreCollector) Collect(ch chan<- prometheus.Metric) {
	qgauge := func(q qmetric, v float64, l ...string) {
		d := q.agg
		if len(l) > 0 {
			d = q.per
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	qcount := func(q qmetric, v uint64, l ...string) {
		d := q.agg
		if len(l) > 0 {
			d = q.per
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	count := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	o := c.opts
	gauge(mIdentity, 1, o.Node, o.Node)
	collectLatencies(o.Core, ch)
	gauge(mBuild, 1, rabbitVersion, productName, o.Version)
	var cs []ConnectionInfo
	if o.Conns != nil {
		cs = o.Conns.ListConnections()
	}
	channels := 0
	for _, x := range cs {
		channels += x.Channels
	}
	gauge(mConnections, float64(len(cs)))
	gauge(mChannels, float64(channels))
	c.collectNode(ch, cs)
	c.collectRaft(ch)
	now := time.Now()
	var headAgeMax float64

	var queues, consumers int
	var ready, unacked, readyBytes int64
	var qStats, vStats = struct{ publish, deliver, ack, redeliver, dropBehind uint64 }{}, totals{}
	for _, vn := range o.Core.VHosts() {
		v, ok := o.Core.VHost(vn)
		if !ok {
			continue
		}
		addStats(&vStats.stats, v.MsgStats())
		for _, q := range v.Queues() {
			st := q.Status()
			queues++
			consumers += st.Consumers
			ready += int64(st.Ready)
			unacked += int64(st.Unacked)
			readyBytes += st.ReadyBytes
			ms := q.MsgStats()
			age, ageKnown := headAge(st, now)
			headAgeMax = max(headAgeMax, age)
			qStats.publish += ms.Publish
			qStats.deliver += ms.Deliver + ms.DeliverNoAck + ms.Get + ms.GetNoAck
			qStats.ack += ms.Ack
			qStats.redeliver += ms.Redeliver
			qStats.dropBehind += ms.DropBehind
			if c.perObject {
				l := []string{vn, q.Name()}
				qgauge(mQReady, float64(st.Ready), l...)
				qgauge(mQUnacked, float64(st.Unacked), l...)
				qgauge(mQMessages, float64(st.Ready+st.Unacked), l...)
				qgauge(mQReadyBytes, float64(st.ReadyBytes), l...)
				qgauge(mQConsumers, float64(st.Consumers), l...)
				qcount(mQPublished, ms.Publish, l...)
				qcount(mQDelivered, ms.Deliver+ms.DeliverNoAck+ms.Get+ms.GetNoAck, l...)
				qcount(mQAcked, ms.Ack, l...)
				qcount(mQRedelivered, ms.Redeliver, l...)
				qcount(mQDropBehind, ms.DropBehind, l...)
				if ageKnown || st.Ready == 0 {
					gauge(mHeadAge, age, l...)
				}
				streamLags(q, func(consumer string, lag int64) { gauge(mStreamLag, float64(lag), vn, q.Name(), consumer) })
			}
		}
	}
	gauge(mConsumers, float64(consumers))
	gauge(mQueues, float64(queues))
	s := vStats.stats
	count(mChPublished, s.Publish)
	count(mChDelivered, s.DeliverNoAck)
	count(mChDeliveredAk, s.Deliver)
	count(mChAcked, s.Ack)
	count(mChRedelivered, s.Redeliver)
	count(mChGet, s.GetNoAck)
	count(mChGetAck, s.Get)
	count(mChGetEmpty, s.GetEmpty)
	count(mChUnroutable, s.DropUnroutable)
	count(mChReturned, s.ReturnUnroutable)
	if !c.perObject {
		// Aggregated: the queue series without labels, summed, as
		// RabbitMQ's /metrics has them.
		var l []string
		qgauge(mQReady, float64(ready), l...)
		qgauge(mQUnacked, float64(unacked), l...)
		qgauge(mQMessages, float64(ready+unacked), l...)
		qgauge(mQReadyBytes, float64(readyBytes), l...)
		qgauge(mQConsumers, float64(consumers), l...)
		qcount(mQPublished, qStats.publish, l...)
		qcount(mQDelivered, qStats.deliver, l...)
		qcount(mQAcked, qStats.ack, l...)
		qcount(mQRedelivered, qStats.redeliver, l...)
		qcount(mQDropBehind, qStats.dropBehind, l...)
		gauge(mHeadAgeMax, headAgeMax)
	}
}
