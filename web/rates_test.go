package web

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"testing"
	"time"
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
			s := newBenchServer(b, c.queues)
			f := newFakeConns(n, false)
			var conns Connections = f
			if c.counters {
				conns = fakeCounters{f}
			}
			s.rates = newRates(time.Hour)
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			s.conns = conns
			for range 10 {
				s.rates.sample(s)
			}
			runtime.GC()
			runtime.ReadMemStats(&m1)
			live := float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / n
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s.rates.sample(s)
			}
			b.ReportMetric(live, "live-B/conn")
			runtime.KeepAlive(f)
		})
	}
}

// ratesClose reports whether got is within 20% of want.
func ratesClose(got, want float64) bool { return math.Abs(got-want) <= 0.2*want }
