package placement

import (
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
)

// ForgetConfig configures a Forgetter.
type ForgetConfig struct {
	Self    string
	Members func() []discovery.Member
	// MetaLeader names the metadata group's leader; only that node
	// forgets, so that it is done once, cluster-wide.
	MetaLeader func() string
	// MetaRaft, if set, is the metadata group's Raft, observed so that a
	// node that comes to lead it sweeps at once.
	MetaRaft *raft.Raft
	// Forget removes, cluster-wide, the non-durable queues and exchanges
	// of node, and returns how many (exchange.Broker.ForgetNode).
	Forget func(node string) int
	Log    *slog.Logger
	// SweepEvery is how often the leader sweeps again while some member
	// is gone (2s): a gone node's objects may still come in from the
	// metadata log after its leave, and Forget reports no failure to
	// retry on.
	SweepEvery time.Duration
}

// Forgetter removes the transient queues and exchanges of nodes that died
// or left (RabbitMQ deletes a node's transient queues with it). It sweeps
// when membership changes (Notify), when the metadata group's leadership
// moves, and every SweepEvery while a member is gone.
type Forgetter struct {
	c    ForgetConfig
	log  *slog.Logger
	kick chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// StartForgetter starts a Forgetter's loop.
func StartForgetter(c ForgetConfig) *Forgetter {
	if c.SweepEvery <= 0 {
		c.SweepEvery = 2 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	f := &Forgetter{c: c, log: c.Log.With("component", "cluster-queues"), kick: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	go f.run()
	return f
}

// Notify asks for a sweep (wire it to discovery's OnEvent).
func (f *Forgetter) Notify(discovery.Event) {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Close stops the loop and waits for it.
func (f *Forgetter) Close() {
	f.once.Do(func() { close(f.quit) })
	<-f.done
}

func (f *Forgetter) run() {
	defer close(f.done)
	var lead chan raft.Observation
	if f.c.MetaRaft != nil {
		lead = make(chan raft.Observation, 1)
		obs := raft.NewObserver(lead, false, func(o *raft.Observation) bool {
			_, ok := o.Data.(raft.LeaderObservation)
			return ok
		})
		f.c.MetaRaft.RegisterObserver(obs)
		defer f.c.MetaRaft.DeregisterObserver(obs)
	}
	var timer *time.Timer
	for {
		var again <-chan time.Time
		if f.sweep() {
			timer = time.NewTimer(f.c.SweepEvery)
			again = timer.C
		}
		select {
		case <-f.quit:
			return
		case <-f.kick:
		case <-lead:
		case <-again:
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
	}
}

// sweep forgets the gone members if this node leads the metadata group.
// It reports whether a member is gone (so that the sweep is repeated).
func (f *Forgetter) sweep() bool {
	gone := false
	for _, m := range f.c.Members() {
		if m.Status == discovery.StatusAlive || m.Name == f.c.Self {
			continue
		}
		gone = true
		if f.c.MetaLeader() != f.c.Self {
			break
		}
		if k := f.c.Forget(m.Name); k > 0 {
			f.log.Info("removed the transient queues and exchanges of a node that is gone", "node", m.Name, "status", m.Status.String(), "objects", k)
		}
	}
	return gone
}
