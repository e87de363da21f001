package frontend

import (
	"sync/atomic"
	"testing"
	"time"
)

// checker counts its calls and says to go on while more is set.
type checker struct {
	calls atomic.Int64
	last  atomic.Int64
	stop  int64 // returns false at this call (0: never)
}

func (c *checker) CheckTimeouts(now int64) bool {
	n := c.calls.Add(1)
	c.last.Store(now)
	return c.stop == 0 || n < c.stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// stays reports whether n keeps its value for a while (no more calls),
// once a tick that was under way has had time to end.
func stays(n *atomic.Int64) bool {
	time.Sleep(20 * time.Millisecond)
	v := n.Load()
	time.Sleep(50 * time.Millisecond)
	return n.Load() == v
}

func TestWatchdogStartsOnceAndAdvancesClock(t *testing.T) {
	w := &Watchdog{tick: 2 * time.Millisecond}
	if w.Now() != 0 {
		t.Fatalf("clock before Start: %d", w.Now())
	}
	done := make(chan struct{})
	defer close(done)
	first, second := &checker{}, &checker{}
	before := time.Now().UnixNano()
	w.Start(done, nil, first)
	if w.Now() < before {
		t.Fatalf("Start set the clock to %d, before %d", w.Now(), before)
	}
	w.Start(done, nil, second) // already running: nothing
	waitFor(t, "three ticks", func() bool { return first.calls.Load() >= 3 })
	if n := second.calls.Load(); n != 0 {
		t.Fatalf("a second Start ran its checker %d times", n)
	}
	waitFor(t, "the clock to follow the ticks", func() bool { return w.Now() == first.last.Load() && w.Now() > before })
}

// TestWatchdogEnds: the watchdog stops checking once done or stop is
// closed, or once its checker says stop.
func TestWatchdogEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		end    func(done, stop chan struct{}) // after the first tick
		stopAt int64                          // the checker's own stop
	}{
		{"done", func(done, _ chan struct{}) { close(done) }, 0},
		{"stop", func(_, stop chan struct{}) { close(stop) }, 0},
		{"checker", func(chan struct{}, chan struct{}) {}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Watchdog{tick: time.Millisecond}
			done, stop, c := make(chan struct{}), make(chan struct{}), &checker{stop: tc.stopAt}
			w.Start(done, stop, c)
			waitFor(t, "two ticks", func() bool { return c.calls.Load() >= 2 })
			tc.end(done, stop)
			if !stays(&c.calls) {
				t.Fatalf("still checking (%d calls) after %s", c.calls.Load(), tc.name)
			}
			if tc.stopAt > 0 && c.calls.Load() != tc.stopAt {
				t.Fatalf("checked %d times, the checker said stop at %d", c.calls.Load(), tc.stopAt)
			}
			if tc.name != "done" {
				close(done)
			}
		})
	}
}

func TestWatchdogExpired(t *testing.T) {
	var w Watchdog // WatchTick
	const at = int64(1_000_000_000_000)
	s := int64(time.Second)
	for _, tc := range []struct {
		name string
		now  int64
		to   time.Duration
		want bool
	}{
		{"no timeout", at + 100*s, 0, false},
		{"at the timeout", at + 5*s, 5 * time.Second, false},
		{"under timeout plus a tick", at + 6*s - 1, 5 * time.Second, false},
		{"at timeout plus a tick", at + 6*s, 5 * time.Second, true},
		{"long past", at + 60*s, 5 * time.Second, true},
		{"clock behind the stamp", at - s, time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := w.Expired(tc.now, at, tc.to); got != tc.want {
				t.Fatalf("Expired(at+%v, %v) = %v, want %v", time.Duration(tc.now-at), tc.to, got, tc.want)
			}
		})
	}
	short := Watchdog{tick: 10 * time.Millisecond}
	if !short.Expired(at+int64(110*time.Millisecond), at, 100*time.Millisecond) {
		t.Fatal("a watchdog's own tick is not the one Expired adds")
	}
}
