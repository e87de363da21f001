package exchange

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/trident-broker/trident/exchange/event"
)

// Alarms is the broker's set of resource alarms (memory, disk), as in
// RabbitMQ: while any alarm is raised, front ends stop accepting published
// messages (AMQP sends connection.blocked and stops reading from publishing
// connections; other protocols stop reading) and consumers keep draining.
// It is safe for concurrent use.
type Alarms struct {
	events  *event.Bus  // alarm.set, alarm.cleared (the Broker's; nil for NewAlarms)
	raised  atomic.Bool // any alarm: the per-message check
	mu      sync.Mutex
	active  map[string]bool
	cleared chan struct{} // closed when the last alarm clears
	subs    map[int]func(blocked bool, reason string)
	nextSub int
}

// NewAlarms returns a set with no alarm raised (a Broker makes its own).
func NewAlarms() *Alarms {
	a := &Alarms{active: map[string]bool{}, subs: map[int]func(bool, string){}, cleared: make(chan struct{})}
	close(a.cleared)
	return a
}

// Set raises (on) or clears the named alarm ("memory", "disk").
func (a *Alarms) Set(name string, on bool) {
	a.mu.Lock()
	if a.active[name] != on {
		a.report(name, on)
	}
	was := len(a.active) > 0
	if on {
		a.active[name] = true
	} else {
		delete(a.active, name)
	}
	now := len(a.active) > 0
	if was == now {
		a.mu.Unlock()
		return
	}
	if now {
		a.cleared = make(chan struct{})
	} else {
		close(a.cleared)
	}
	a.raised.Store(now)
	reason := a.reasonLocked()
	subs := make([]func(bool, string), 0, len(a.subs))
	for _, f := range a.subs {
		subs = append(subs, f)
	}
	a.mu.Unlock()
	for _, f := range subs {
		f(now, reason)
	}
}

// Raised reports whether any alarm is raised; it costs one atomic load.
func (a *Alarms) Raised() bool { return a.raised.Load() }

// Active lists the raised alarms, sorted.
func (a *Alarms) Active() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.active))
	for n := range a.active {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Blocked reports whether publishing is blocked, and if so the channel
// that is closed when it no longer is, and RabbitMQ's reason text
// ("low on memory", "low on disk").
func (a *Alarms) Blocked() (blocked bool, cleared <-chan struct{}, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.active) > 0, a.cleared, a.reasonLocked()
}

func (a *Alarms) reasonLocked() string {
	var parts []string
	for _, n := range []string{"memory", "disk"} {
		if a.active[n] {
			parts = append(parts, "low on "+n)
		}
	}
	for n := range a.active {
		if n != "memory" && n != "disk" {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, " & ")
}

// Subscribe calls fn whenever publishing becomes blocked or unblocked. The
// returned function cancels the subscription.
func (a *Alarms) Subscribe(fn func(blocked bool, reason string)) (cancel func()) {
	a.mu.Lock()
	id := a.nextSub
	a.nextSub++
	a.subs[id] = fn
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		delete(a.subs, id)
		a.mu.Unlock()
	}
}

// report emits alarm.set or alarm.cleared for the named alarm.
func (a *Alarms) report(name string, on bool) {
	if !a.events.On() {
		return
	}
	ev := event.AlarmCleared
	if on {
		ev = event.AlarmSet
	}
	a.events.Emit(ev, event.Prop{Key: "source", Value: name})
}
