package web

import (
	"errors"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, u *auth.User) {
	tags := u.Tags()
	if tags == nil {
		tags = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": u.Name(), "tags": tags})
}

var exchangeTypes = []map[string]any{
	{"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
	{"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
	{"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
	{"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
	{"name": "x-delayed-message", "description": "Delayed Message Exchange.", "enabled": true},
	{"name": "x-consistent-hash", "description": "Consistent Hashing Exchange", "enabled": true},
	{"name": "x-modulus-hash", "description": "Modulus Hashing Exchange", "enabled": true},
}

// totals counts the objects and messages of the vhosts u sees.
type totals struct {
	queues, exchanges, consumers int
	ready, unacked               int64
	stats                        exchange.MsgStats
}

func (s *Server) totals(vs []*exchange.VHost) totals {
	var t totals
	for _, v := range vs {
		for _, q := range v.Queues() {
			st := q.Status()
			t.queues++
			t.consumers += st.Consumers
			t.ready += int64(st.Ready)
			t.unacked += int64(st.Unacked)
		}
		t.exchanges += len(v.Exchanges())
		addStats(&t.stats, v.MsgStats())
	}
	return t
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request, u *auth.User) {
	vs := s.visibleVHosts(u)
	t := s.totals(vs)
	conns := s.visibleConnections(u, "")
	channels := 0
	for _, c := range conns {
		channels += c.Channels
	}
	// Rates: node-wide for users that see everything, else summed
	// per visible vhost (without history).
	var win window
	if isMonitor(u) {
		win = s.rates.node(historyAge(r))
	} else {
		win = s.sumVHostWindows(vs)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"management_version":        rabbitVersion,
		"rates_mode":                "basic",
		"sample_retention_policies": map[string]any{"global": []int{600, 3600, 28800, 86400}, "basic": []int{600, 3600}, "detailed": []int{600}},
		"exchange_types":            exchangeTypes,
		"product_version":           s.version,
		"product_name":              productName,
		"rabbitmq_version":          rabbitVersion,
		"cluster_name":              s.clusterName(),
		"erlang_version":            runtime.Version(),
		"erlang_full_version":       runtime.Version(),
		"disable_stats":             false,
		"enable_queue_totals":       false,
		"message_stats":             messageStats(kindVHost, t.stats, win),
		"queue_totals":              lengths(t.ready, t.unacked, win),
		"object_totals": map[string]int{"connections": len(conns), "channels": channels,
			"exchanges": t.exchanges, "queues": t.queues, "consumers": t.consumers},
		"statistics_db_event_queue": 0,
		"node":                      s.node,
		"being_drained":             s.beingDrained(), // this node's maintenance mode (maintenance.go)
		"listeners":                 s.clusterListenersJSON(),
		"contexts":                  []map[string]any{{"node": s.node, "description": "RabbitMQ Management", "path": "/", "port": strconv.Itoa(s.httpPort())}},
	})
}

func (s *Server) sumVHostWindows(vs []*exchange.VHost) window {
	var out window
	for i, v := range vs {
		w := s.rates.vhost(v.Name(), 0)
		if !w.ok {
			continue
		}
		if i == 0 || !out.ok {
			out = window{a: sample{t: w.a.t}, b: sample{t: w.b.t}, ok: true}
		}
		addStats(&out.a.s, w.a.s)
		addStats(&out.b.s, w.b.s)
		out.a.ready += w.a.ready
		out.a.unacked += w.a.unacked
		out.b.ready += w.b.ready
		out.b.unacked += w.b.unacked
	}
	return out
}

func (s *Server) httpPort() int {
	for _, l := range s.listeners() {
		if l.Protocol == "http" && l.Addr != nil {
			_, p := splitHostPort(l.Addr.String())
			return p
		}
	}
	return 15672
}

func (s *Server) nodeJSON() map[string]any {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var diskFree uint64
	if s.dataDir != "" {
		var st syscall.Statfs_t
		if syscall.Statfs(s.dataDir, &st) == nil {
			diskFree = st.Bavail * uint64(st.Bsize)
		}
	}
	conns := 0
	if s.conns != nil {
		conns = len(s.conns.ListConnections())
	}
	return map[string]any{
		"name": s.node, "type": "disc", "running": true, "os_pid": strconv.Itoa(os.Getpid()),
		"mem_used": ms.Sys, "mem_limit": s.memLimit, "mem_alarm": s.alarmOn("memory"),
		"disk_free": diskFree, "disk_free_limit": s.diskLimit, "disk_free_alarm": s.alarmOn("disk"),
		"fd_used": 0, "fd_total": 0, "sockets_used": conns, "sockets_total": 0,
		"proc_used": runtime.NumGoroutine(), "proc_total": 0,
		"processors": runtime.NumCPU(), "run_queue": 0,
		"uptime":     time.Since(s.started).Milliseconds(),
		"partitions": []any{}, "applications": []any{}, "enabled_plugins": []string{"rabbitmq_management", "rabbitmq_prometheus"},
		"exchange_types": exchangeTypes, "being_drained": s.beingDrained(), "rates_mode": "basic", "net_ticktime": 60,
		"config_files": []any{}, "log_files": []any{}, "cluster_links": []any{},
		"listeners": s.listenersJSON(), // Trident's: RabbitMQ lists them in /api/overview only
	}
}

// memoryBreakdown is RabbitMQ's node memory breakdown, from what this
// process can tell: queue_procs and quorum_queue_procs are what the
// queues hold in memory (bodies and message headers; the rest of their
// backlog is on disk), the other keys come from the Go runtime. Bytes.
func (s *Server) memoryBreakdown() map[string]any {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var classic, quorum int64
	for _, vn := range s.core.VHosts() {
		v, ok := s.core.VHost(vn)
		if !ok {
			continue
		}
		for _, q := range v.Queues() {
			if q.Quorum() {
				quorum += q.Status().Memory
			} else {
				classic += q.Status().Memory
			}
		}
	}
	heapInUse := int64(ms.HeapInuse)
	return map[string]any{
		"queue_procs":          classic,
		"quorum_queue_procs":   quorum,
		"other_proc":           int64(ms.StackSys),
		"binary":               max(0, heapInUse-classic-quorum), // the rest of the heap: connections, store buffers, caches
		"code":                 0,
		"other_system":         int64(ms.Sys - ms.HeapSys - ms.StackSys),
		"allocated_unused":     int64(ms.HeapIdle - ms.HeapReleased),
		"reserved_unallocated": int64(ms.HeapReleased),
		"strategy":             "rss",
		"total":                map[string]any{"erlang": int64(ms.Sys - ms.HeapReleased), "rss": rss(), "allocated": int64(ms.Sys)},
	}
}

// rss is the process's resident set size, 0 if unknown.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// listNodes and getNode (/api/nodes): see cluster.go.

// aliveness declares the queue aliveness-test in the vhost, publishes a
// message to it and gets it back, as RabbitMQ does, with u's permissions
// (configure and read on the queue, write on the default exchange).
func (s *Server) aliveness(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, okv := s.writeVHost(w, r, u)
	if !okv {
		return
	}
	const q = "aliveness-test"
	fail := func(reason string) {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "failed", "reason": reason})
	}
	// As RabbitMQ, on the user's own channel: its permissions on the
	// queue and the default exchange apply.
	as := s.actor(u)
	if err := errors.Join(as.CheckWrite(v.Name(), exchange.ResourceExchange, ""), as.CheckRead(v.Name(), exchange.ResourceQueue, q)); err != nil {
		accessRefused(w)
		return
	}
	if _, err := v.Do(as, exchange.QueueDeclare{Name: q}); err != nil {
		if errors.Is(err, auth.ErrAccessRefused) {
			accessRefused(w)
		} else {
			fail(errText(err))
		}
		return
	}
	if _, err := v.Publish(&exchange.Message{RoutingKey: q, Body: []byte("test_message")}, exchange.PublishOpts{}); err != nil {
		fail(errText(err))
		return
	}
	qq, err := v.Queue(q, nil)
	if err != nil {
		fail(errText(err))
		return
	}
	received := false
	for {
		if _, got := qq.Get(true); !got {
			break
		}
		received = true
	}
	if !received {
		fail("aliveness-test message not received")
		return
	}
	ok(w, r, u)
}

func (s *Server) alarmOn(name string) bool {
	if a, ok := s.core.(interface{ Alarms() *exchange.Alarms }); ok && a.Alarms() != nil {
		for _, x := range a.Alarms().Active() {
			if x == name {
				return true
			}
		}
	}
	return false
}
