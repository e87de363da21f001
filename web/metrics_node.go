package web

import (
	"os"
	"slices"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"

	"github.com/trident-broker/trident/exchange"
)

// MetricsOptions configure the Prometheus endpoints beyond the core and
// the connections (NewMetricsWith).
type MetricsOptions struct {
	Core    Core
	Conns   Connections
	Node    string
	Version string
	// MemLimit and DiskFreeLimit are the alarms' thresholds in bytes (0:
	// none); DataDir is where disk space is measured.
	MemLimit, DiskFreeLimit int64
	DataDir                 string
	// RaftGroups lists this node's Raft groups (nil: not clustered).
	RaftGroups func() []RaftGroup
	// Raft receives hashicorp/raft's own measurements (RaftSink), nil
	// when not clustered.
	Raft *RaftSink
}

// The node's resources and churn, with RabbitMQ's names, on /metrics.
var (
	mMemLimit    = desc("rabbitmq_resident_memory_limit_bytes", "Memory high watermark in bytes")
	mMemUsed     = desc("rabbitmq_process_resident_memory_bytes", "Memory used in bytes")
	mDiskFree    = desc("rabbitmq_disk_space_available_bytes", "Disk space available in bytes")
	mDiskLimit   = desc("rabbitmq_disk_space_available_limit_bytes", "Free disk space low watermark in bytes")
	mMaxFDs      = desc("rabbitmq_process_max_fds", "Open file descriptors limit")
	mOpenFDs     = desc("rabbitmq_process_open_fds", "Open file descriptors")
	mMaxSockets  = desc("rabbitmq_process_max_tcp_sockets", "Open TCP sockets limit (Trident: the file descriptors limit)")
	mOpenSockets = desc("rabbitmq_process_open_tcp_sockets", "Open TCP sockets (Trident: client connections)")
	mAlarmMem    = desc("rabbitmq_alarms_memory_used_watermark", "is 1 if VM memory watermark alarm is in effect")
	mAlarmDisk   = desc("rabbitmq_alarms_free_disk_space_watermark", "is 1 if free disk space watermark alarm is in effect")
	mAlarmFDs    = desc("rabbitmq_alarms_file_descriptor_limit", "is 1 if file descriptor limit alarm is in effect (Trident raises none)")
	mAlarm       = desc("trident_alarm", "1 while the named resource alarm is raised", "alarm")

	mChConsumers   = desc("rabbitmq_channel_consumers", "Consumers on a channel")
	mChConfirmed   = desc("rabbitmq_channel_messages_confirmed_total", "Total number of messages published into an exchange and confirmed on the channel (channels open now)")
	mChUnconfirmed = desc("rabbitmq_channel_messages_unconfirmed", "Published but not yet confirmed messages")
	mChReturned    = desc("rabbitmq_channel_messages_unroutable_returned_total", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable")

	mConnOpened  = desc("rabbitmq_connections_opened_total", "Total number of connections opened")
	mConnClosed  = desc("rabbitmq_connections_closed_total", "Total number of connections closed or terminated")
	mChOpened    = desc("rabbitmq_channels_opened_total", "Total number of channels opened")
	mChClosed    = desc("rabbitmq_channels_closed_total", "Total number of channels closed")
	mQDeclared   = desc("rabbitmq_queues_declared_total", "Total number of queues declared")
	mQCreated    = desc("rabbitmq_queues_created_total", "Total number of queues created")
	mQDeleted    = desc("rabbitmq_queues_deleted_total", "Total number of queues deleted")
	mTConnOpened = desc("trident_connections_opened_total", "Total number of client connections opened (authenticated), by protocol", "protocol")
	mTConnClosed = desc("trident_connections_closed_total", "Total number of client connections closed, by protocol", "protocol")

	mHeadAgeMax = desc("trident_queue_head_message_age_seconds", "The longest time any queue's head message has waited since it was enqueued (the per-queue series are on /metrics/per-object and /metrics/detailed)")
	mHeadAge    = desc("trident_queue_head_message_age_seconds", "How long the queue's head message has waited since it was enqueued (0 when the queue has no ready message)", "vhost", "queue")
	mStreamLag  = desc("trident_stream_consumer_lag_messages", "Messages between a stream's named consumer's stored offset and the stream's last offset", "vhost", "queue", "consumer")
)

var nodeDescs = []*prometheus.Desc{mMemLimit, mMemUsed, mDiskFree, mDiskLimit, mMaxFDs, mOpenFDs, mMaxSockets, mOpenSockets,
	mAlarmMem, mAlarmDisk, mAlarmFDs, mAlarm, mChConsumers, mChConfirmed, mChUnconfirmed, mChReturned,
	mConnOpened, mConnClosed, mChOpened, mChClosed, mQDeclared, mQCreated, mQDeleted, mTConnOpened, mTConnClosed}

// churner is the core's churn counters (exchange.Broker has them).
type churner interface{ Churn() *exchange.Churn }

// collectNode sends the node's resources, alarms and churn.
func (c *coreCollector) collectNode(ch chan<- prometheus.Metric, conns []ConnectionInfo) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	count := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	o := c.opts
	gauge(mMemLimit, float64(o.MemLimit))
	gauge(mDiskLimit, float64(o.DiskFreeLimit))
	var rss, openFDs, maxFDs float64
	if p, err := procfs.NewProc(os.Getpid()); err == nil {
		if st, err := p.Stat(); err == nil {
			rss = float64(st.ResidentMemory())
		}
		if n, err := p.FileDescriptorsLen(); err == nil {
			openFDs = float64(n)
		}
		if l, err := p.Limits(); err == nil {
			maxFDs = float64(l.OpenFiles)
		}
	}
	gauge(mMemUsed, rss)
	gauge(mOpenFDs, openFDs)
	gauge(mMaxFDs, maxFDs)
	gauge(mMaxSockets, maxFDs)
	gauge(mOpenSockets, float64(len(conns)))
	if o.DataDir != "" {
		var st syscall.Statfs_t
		if syscall.Statfs(o.DataDir, &st) == nil {
			gauge(mDiskFree, float64(st.Bavail*uint64(st.Bsize)))
		}
	}
	var active []string
	if a, ok := o.Core.(interface{ Alarms() *exchange.Alarms }); ok && a.Alarms() != nil {
		active = a.Alarms().Active()
	}
	on := func(name string) float64 {
		if slices.Contains(active, name) {
			return 1
		}
		return 0
	}
	gauge(mAlarmMem, on("memory"))
	gauge(mAlarmDisk, on("disk"))
	gauge(mAlarmFDs, 0)
	for _, n := range []string{"memory", "disk"} {
		gauge(mAlarm, on(n), n)
	}

	var consumers, unconfirmed int
	var confirmed uint64
	for _, x := range conns {
		for _, chn := range x.ChannelList {
			consumers += chn.Consumers
			unconfirmed += chn.Unconfirmed
			confirmed += chn.Confirmed
		}
	}
	gauge(mChConsumers, float64(consumers))
	gauge(mChUnconfirmed, float64(unconfirmed))
	count(mChConfirmed, confirmed)

	if b, ok := o.Core.(churner); ok {
		s := b.Churn().Stats()
		var opened, closed uint64
		for _, p := range exchange.Protocols() {
			opened += s.ConnectionsOpened[p]
			closed += s.ConnectionsClosed[p]
			if p != exchange.ProtoOther {
				count(mTConnOpened, s.ConnectionsOpened[p], p.String())
				count(mTConnClosed, s.ConnectionsClosed[p], p.String())
			}
		}
		count(mConnOpened, opened)
		count(mConnClosed, closed)
		count(mChOpened, s.ChannelsOpened)
		count(mChClosed, s.ChannelsClosed)
		count(mQDeclared, s.QueuesDeclared)
		count(mQCreated, s.QueuesCreated)
		count(mQDeleted, s.QueuesDeleted)
	}
}
