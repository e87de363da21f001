package web

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// fakeConns is a front end with n connections, idle unless bumped. Its
// ListConnections builds what a real front end builds (MQTT's: client
// properties in a fresh map, addresses as strings).
type fakeConns struct {
	names []string
	ctr   [][4]uint64 // recv, send, published, delivered
	chans bool        // AMQP-like: one channel per connection
}

func newFakeConns(n int, chans bool) *fakeConns {
	f := &fakeConns{names: make([]string, n), ctr: make([][4]uint64, n), chans: chans}
	for i := range f.names {
		f.names[i] = fmt.Sprintf("127.0.0.1:%d -> 127.0.0.1:1883 #%d", 10000+i%50000, i)
	}
	sort.Strings(f.names)
	return f
}

func (f *fakeConns) ListConnections() []ConnectionInfo {
	var out []ConnectionInfo
	for i, n := range f.names {
		c := f.ctr[i]
		ci := ConnectionInfo{Name: n, Protocol: "MQTT 3.1.1", User: "guest", VHost: "/",
			Peer: fmt.Sprintf("127.0.0.1:%d", 10000+i), Local: "127.0.0.1:1883",
			RecvOct: c[0], SendOct: c[1], Published: c[2], Delivered: c[3],
			ClientProperties: map[string]any{"client_id": n, "clean_start": false, "recv_publish": c[2],
				"sent_publish": c[3], "recv_bytes": c[0], "sent_bytes": c[1], "subscriptions": 1, "inflight": 0}}
		if f.chans {
			ci.Channels = 1
			ci.ChannelList = []ChannelInfo{{Number: 1, Published: c[2], Delivered: c[3], Confirmed: c[2]}}
		}
		out = append(out, ci)
	}
	return out
}

func (f *fakeConns) CloseConnection(name, reason string) bool { return false }

// fakeCounters is fakeConns with CounterSource, as the front ends give it.
type fakeCounters struct{ *fakeConns }

func (f fakeCounters) EachCounters(fn func(c *ConnCounters)) {
	var c ConnCounters
	var ch [1]ChannelInfo
	for i, n := range f.names {
		x := f.ctr[i]
		c = ConnCounters{Name: n, RecvOct: x[0], SendOct: x[1], Published: x[2], Delivered: x[3]}
		if f.chans {
			ch[0] = ChannelInfo{Number: 1, Published: x[2], Delivered: x[3], Confirmed: x[2]}
			c.ChannelList = ch[:]
		}
		fn(&c)
	}
}

// newRatesServer is newBenchServer with connections conns.
func newRatesServer(tb testing.TB, queues int, conns Connections) *Server {
	s := newBenchServer(tb, queues)
	s2 := New(Options{Users: s.users, Core: s.core, Conns: conns, StatsInterval: time.Hour})
	tb.Cleanup(s2.Close)
	return s2
}

// BenchmarkRatesTick is one stats tick over 18,000 idle connections,
// with as many queues (an MQTT fleet of subscribed devices) or none:
// allocs/op and B/op per tick, and live-B/conn, the heap the sampler
// holds per connection (and its queue) after 10 ticks. "list" reads the
// connections through ListConnections, "counters" through CounterSource.
func BenchmarkRatesTick(b *testing.B) {
	const n = 18_000
	for _, c := range []struct {
		name     string
		queues   int
		counters bool
	}{{"queues-list", n, false}, {"queues-counters", n, true}, {"noqueues-list", 0, false}, {"noqueues-counters", 0, true}} {
		b.Run(c.name, func(b *testing.B) {
			f := newFakeConns(n, false)
			var conns Connections = f
			if c.counters {
				conns = fakeCounters{f}
			}
			s := newRatesServer(b, c.queues, conns)
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			rt := newRates(time.Hour) // the server's own sampler sleeps
			for range 10 {
				rt.sample(s)
			}
			runtime.GC()
			runtime.ReadMemStats(&m1)
			live := float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / n
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				rt.sample(s)
			}
			b.ReportMetric(live, "live-B/conn")
			runtime.KeepAlive(f)
		})
	}
}

// TestRatesIdleConnectionsNoAllocation: a tick over idle connections
// allocates a small constant, whatever their number (the sampler's state
// is kept between ticks and read through CounterSource).
func TestRatesIdleConnectionsNoAllocation(t *testing.T) {
	allocs := func(n int, chans bool) float64 {
		s := newRatesServer(t, 0, fakeCounters{newFakeConns(n, chans)})
		s.rates.sample(s)
		return testing.AllocsPerRun(20, func() { s.rates.sample(s) })
	}
	for _, chans := range []bool{false, true} {
		small, large := allocs(10, chans), allocs(5000, chans)
		if large != small || large > 10 {
			t.Errorf("channels %v: allocations per tick %v with 10 idle connections, %v with 5000", chans, small, large)
		}
	}
}

// TestRatesConnectionChannelRates: a connection (and channel) whose
// counters grow by a known amount between two ticks shows that amount over
// the ticks' interval as its rate in /api/connections and /api/channels,
// then 0 when idle; a closed connection's state is dropped.
func TestRatesConnectionChannelRates(t *testing.T) {
	f := newFakeConns(3, true)
	s := newRatesServer(t, 0, fakeCounters{f}) // its first tick
	time.Sleep(200 * time.Millisecond)
	f.ctr[1] = [4]uint64{5000, 7000, 100, 40} // recv, send, published, delivered
	s.rates.sample(s)
	rt := s.rates
	dt := float64(rt.at[rt.gen]-rt.at[rt.gen-1]) / 1000
	if dt < 0.15 {
		t.Fatalf("ticks %vs apart", dt)
	}
	type det struct {
		Rate float64 `json:"rate"`
	}
	type ms struct {
		Publish        uint64 `json:"publish"`
		PublishDetails det    `json:"publish_details"`
		DeliverDetails det    `json:"deliver_details"`
		ConfirmDetails det    `json:"confirm_details"`
	}
	type conn struct {
		Name           string `json:"name"`
		RecvOctDetails det    `json:"recv_oct_details"`
		SendOctDetails det    `json:"send_oct_details"`
		MessageStats   *ms    `json:"message_stats"`
	}
	read := func() (map[string]conn, map[string]conn) {
		var cs, chs []conn
		decodeJSON(t, serve(t, s, "/api/connections").Body.Bytes(), &cs)
		decodeJSON(t, serve(t, s, "/api/channels").Body.Bytes(), &chs)
		mc, mch := map[string]conn{}, map[string]conn{}
		for _, c := range cs {
			mc[c.Name] = c
		}
		for _, c := range chs {
			mch[c.Name] = c
		}
		if len(mc) != len(f.names) || len(mch) != len(f.names) {
			t.Fatalf("%d connections, %d channels listed", len(mc), len(mch))
		}
		return mc, mch
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*math.Max(1, want) {
			t.Errorf("%s: rate %v, want %v", what, got, want)
		}
	}
	cs, chs := read()
	busy, idle := f.names[1], f.names[0]
	c := cs[busy]
	near("recv_oct", c.RecvOctDetails.Rate, 5000/dt)
	near("send_oct", c.SendOctDetails.Rate, 7000/dt)
	if c.MessageStats == nil {
		t.Fatalf("no message_stats: %+v", c)
	}
	near("publish", c.MessageStats.PublishDetails.Rate, 100/dt)
	near("deliver", c.MessageStats.DeliverDetails.Rate, 40/dt)
	ch := chs[busy+" (1)"]
	near("channel publish", ch.MessageStats.PublishDetails.Rate, 100/dt)
	near("channel deliver", ch.MessageStats.DeliverDetails.Rate, 40/dt)
	near("channel confirm", ch.MessageStats.ConfirmDetails.Rate, 100/dt)
	near("idle connection", cs[idle].RecvOctDetails.Rate, 0)
	near("idle channel", chs[idle+" (1)"].MessageStats.PublishDetails.Rate, 0)

	s.rates.sample(s) // no change since: rates fall to 0
	cs, chs = read()
	near("recv_oct idle", cs[busy].RecvOctDetails.Rate, 0)
	near("publish idle", cs[busy].MessageStats.PublishDetails.Rate, 0)
	near("channel publish idle", chs[busy+" (1)"].MessageStats.PublishDetails.Rate, 0)
	if cs[busy].MessageStats.Publish != 100 {
		t.Errorf("publish counter %d", cs[busy].MessageStats.Publish)
	}

	f.names, f.ctr = f.names[:2], f.ctr[:2] // the third closes
	s.rates.sample(s)
	if len(rt.conns.m) != 2 || len(rt.chans.m) != 2 {
		t.Errorf("after a close: %d connections, %d channels sampled", len(rt.conns.m), len(rt.chans.m))
	}
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %.300s", err, b)
	}
}

// TestRatesQueueExchange: a queue's and the default exchange's rates and
// lengths over a known interval, from the readings the sampler keeps of
// them (publish, get, get_no_ack, deliver_get, messages_ready).
func TestRatesQueueExchange(t *testing.T) {
	s := newBenchServer(t, 1) // queue-000000, sampled once
	v, _ := s.core.VHost("/")
	time.Sleep(200 * time.Millisecond)
	for range 30 {
		if _, err := v.Publish(&exchange.Message{RoutingKey: "queue-000000", Body: []byte("m")}, exchange.PublishOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := v.Queue("queue-000000", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, ok := q.Get(true); !ok {
			t.Fatal("get")
		}
	}
	s.rates.sample(s)
	rt := s.rates
	dt := float64(rt.at[rt.gen]-rt.at[rt.gen-1]) / 1000
	type det struct {
		Rate float64 `json:"rate"`
	}
	var qj struct {
		MessagesReadyDetails det `json:"messages_ready_details"`
		MessageStats         struct {
			PublishDetails    det `json:"publish_details"`
			GetNoAckDetails   det `json:"get_no_ack_details"`
			DeliverGetDetails det `json:"deliver_get_details"`
			GetDetails        det `json:"get_details"`
		} `json:"message_stats"`
	}
	decodeJSON(t, serve(t, s, "/api/queues/%2F/queue-000000").Body.Bytes(), &qj)
	var xj struct {
		MessageStats struct {
			PublishInDetails det `json:"publish_in_details"`
		} `json:"message_stats"`
	}
	decodeJSON(t, serve(t, s, "/api/exchanges/%2F/amq.default").Body.Bytes(), &xj)
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"publish", qj.MessageStats.PublishDetails.Rate, 30 / dt},
		{"get_no_ack", qj.MessageStats.GetNoAckDetails.Rate, 10 / dt},
		{"deliver_get", qj.MessageStats.DeliverGetDetails.Rate, 10 / dt},
		{"get", qj.MessageStats.GetDetails.Rate, 0},
		{"messages_ready", qj.MessagesReadyDetails.Rate, 20 / dt},
		{"exchange publish_in", xj.MessageStats.PublishInDetails.Rate, 30 / dt},
	} {
		if math.Abs(c.got-c.want) > 1e-6*math.Max(1, c.want) {
			t.Errorf("%s: rate %v, want %v", c.what, c.got, c.want)
		}
	}
}
