package mqtt

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// Mosquitto's $SYS/broker/... topics (mosquitto.conf sys_interval):
// every Config.SysInterval the server computes them and sends each to the
// connected clients whose $-filters match it (QoS 0, retain 0, as a message
// matching an established subscription), and keeps the last values as
// retained messages for new subscriptions (in memory only: they are
// recomputed at start).
//
// $SYS topics live outside the core: they are never routed through the
// MQTT exchange, so an AMQP or STOMP consumer of amq.topic never sees
// them, and "#" or "+/..." never match them [MQTT-4.7.2-1]: only a filter
// that itself begins with "$SYS" does. A (non-shared) subscription to a
// "$" filter is not bound in the core either (bindAndConsume), so that
// nothing an AMQP or STOMP client publishes to amq.topic with a "$SYS."
// routing key reaches it. A subscription to them is checked
// as any other (checkSubscribe: read on the MQTT exchange and, when the
// user has topic permissions there, read on the filter's routing key,
// e.g. "$SYS.#"); a client may never publish to a topic beginning with
// "$" (MQTT 5: PUBACK/PUBREC 0x87; 3.1.1: the connection is closed, as
// for any publish the user may not make).

// sysState is the $SYS tree and the totals of closed connections.
type sysState struct {
	started time.Time

	mu   sync.RWMutex
	msgs map[string]*retainedMsg // topic → last value
	max  int                     // most clients connected at once

	// Counters of connections that have ended (noteClosed); the live
	// ones are summed at each tick.
	recvPub, sentPub, recvBytes, sentBytes atomic.Uint64
	connects                               atomic.Uint64 // connections accepted (CONNACK 0)

	// load: the $SYS/broker/load/... moving averages (under mu).
	lastAt   time.Time
	lastVals [loadMetrics]uint64
	avg      [loadMetrics][3]float64

	stop chan struct{}
	done chan struct{}
}

// isSysTopic reports whether topic or filter is a server topic ("$...").
func isSysTopic(topic string) bool { return strings.HasPrefix(topic, "$") }

// startSys starts the $SYS ticker unless the interval is 0.
func (s *Server) startSys() {
	s.sys = &sysState{started: time.Now(), msgs: map[string]*retainedMsg{}}
	if s.cfg.SysInterval <= 0 {
		return
	}
	s.sys.stop, s.sys.done = make(chan struct{}), make(chan struct{})
	s.publishSys()
	go func() {
		defer close(s.sys.done)
		t := time.NewTicker(s.cfg.SysInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.publishSys()
			case <-s.sys.stop:
				return
			}
		}
	}()
}

// stopSys stops the ticker (Shutdown).
func (s *Server) stopSys() {
	if s.sys != nil && s.sys.stop != nil {
		close(s.sys.stop)
		<-s.sys.done
		s.sys.stop = nil
	}
}

// noteClosed adds an ended connection's counters to the totals.
func (s *Server) noteClosed(c *conn) {
	if !c.connected.Load() {
		return
	}
	st := s.sys
	st.recvPub.Add(c.recvPublish.Load())
	st.sentPub.Add(c.sentPublish.Load())
	st.recvBytes.Add(c.recvBytes.Load())
	st.sentBytes.Add(c.sentBytes.Load())
}

// publishSys computes the tree and sends what matches to subscribers.
func (s *Server) publishSys() {
	st := s.sys
	conns := s.conns.Snapshot()
	var live []*conn
	connected, subs := 0, 0
	recvPub, sentPub := st.recvPub.Load(), st.sentPub.Load()
	recvBytes, sentBytes := st.recvBytes.Load(), st.sentBytes.Load()
	for _, c := range conns {
		if !c.connected.Load() || c.se == nil {
			continue
		}
		live = append(live, c)
		connected++
		recvPub += c.recvPublish.Load()
		sentPub += c.sentPublish.Load()
		recvBytes += c.recvBytes.Load()
		sentBytes += c.sentBytes.Load()
	}
	s.mu.Lock()
	disconnected := 0
	for _, se := range s.sessions {
		subs += len(se.subList())
		se.mu.Lock()
		if se.owner == nil {
			disconnected++
		}
		se.mu.Unlock()
	}
	s.mu.Unlock()
	retained := s.retained.count()
	now := time.Now()
	st.mu.Lock()
	st.max = max(st.max, connected)
	maximum := st.max
	load := st.updateLoad(now, [loadMetrics]uint64{recvPub, sentPub, recvBytes, sentBytes, st.connects.Load()})
	st.mu.Unlock()
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	i := func(n int) string { return strconv.Itoa(n) }
	values := [][2]string{
		{"$SYS/broker/version", "trident version " + s.cfg.Version},
		{"$SYS/broker/uptime", strconv.FormatInt(int64(time.Since(st.started)/time.Second), 10) + " seconds"},
		{"$SYS/broker/clients/connected", i(connected)},
		{"$SYS/broker/clients/active", i(connected)},
		{"$SYS/broker/clients/disconnected", i(disconnected)},
		{"$SYS/broker/clients/inactive", i(disconnected)},
		{"$SYS/broker/clients/total", i(connected + disconnected)},
		{"$SYS/broker/clients/maximum", i(maximum)},
		{"$SYS/broker/messages/received", u(recvPub)},
		{"$SYS/broker/messages/sent", u(sentPub)},
		{"$SYS/broker/publish/messages/received", u(recvPub)},
		{"$SYS/broker/publish/messages/sent", u(sentPub)},
		{"$SYS/broker/bytes/received", u(recvBytes)},
		{"$SYS/broker/bytes/sent", u(sentBytes)},
		{"$SYS/broker/subscriptions/count", i(subs)},
		{"$SYS/broker/retained messages/count", i(retained)},
	}
	for m, name := range loadNames {
		for k, period := range loadPeriods {
			values = append(values, [2]string{"$SYS/broker/load/" + name + "/" + period,
				strconv.FormatFloat(load[m][k], 'f', 2, 64)})
		}
	}
	msgs := make([]*retainedMsg, len(values))
	st.mu.Lock()
	for k, v := range values {
		m := &retainedMsg{Topic: v[0], Payload: []byte(v[1])}
		st.msgs[v[0]] = m
		msgs[k] = m
	}
	st.mu.Unlock()
	for _, c := range live {
		for _, sub := range c.se.subList() {
			if sub.Share != "" || !isSysTopic(sub.Filter) {
				continue
			}
			for _, m := range msgs {
				if wire.Match(sub.Filter, m.Topic) {
					c.push(outItem{kind: itemSys, ret: m, sub: sub})
				}
			}
		}
	}
}

// sysMatch returns the $SYS values a new subscription to filter gets as
// retained messages: none unless filter begins with "$" [MQTT-4.7.2-1].
func (s *Server) sysMatch(filter string) []*retainedMsg {
	if s.sys == nil || !isSysTopic(filter) {
		return nil
	}
	s.sys.mu.RLock()
	defer s.sys.mu.RUnlock()
	var out []*retainedMsg
	for topic, m := range s.sys.msgs {
		if wire.Match(filter, topic) {
			out = append(out, m)
		}
	}
	return out
}

// errSysPublish refuses a client's PUBLISH to a "$" topic.
var errSysPublish = errProto(codeNotAuthorized, "mqtt: topics beginning with $ are the server's")

// The load averages, as Mosquitto's: per minute, exponentially weighted
// over 1, 5 and 15 minutes.
const loadMetrics = 5

var (
	loadNames   = [loadMetrics]string{"messages/received", "messages/sent", "bytes/received", "bytes/sent", "connections"}
	loadPeriods = [3]string{"1min", "5min", "15min"}
	loadSeconds = [3]float64{60, 300, 900}
)

// updateLoad folds the totals at now into the averages (under st.mu).
func (st *sysState) updateLoad(now time.Time, totals [loadMetrics]uint64) [loadMetrics][3]float64 {
	if !st.lastAt.IsZero() {
		if dt := now.Sub(st.lastAt).Seconds(); dt > 0 {
			for m := range totals {
				perMin := float64(totals[m]-st.lastVals[m]) * 60 / dt
				for k, p := range loadSeconds {
					e := math.Exp(-dt / p)
					st.avg[m][k] = e*st.avg[m][k] + (1-e)*perMin
				}
			}
		}
	}
	st.lastAt, st.lastVals = now, totals
	return st.avg
}
