package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Reason is what closed client connections are told (AMQP 320
// CONNECTION_FORCED's text, STOMP's ERROR message), as RabbitMQ says it.
const Reason = "Node was put into maintenance mode"

// MetaKey is the gossiped metadata key a drained node sets (any value):
// other nodes report it being drained and place no new replicated
// queue's leader on it.
const MetaKey = "maintenance"

// Leaders is the node's Raft groups host (groups.Host).
type Leaders interface {
	// Names lists the running groups.
	Names() []string
	// Raft returns the running group name.
	Raft(name string) (*raft.Raft, bool)
}

// Clients closes the node's client connections.
type Clients interface {
	// CloseClients closes every client connection on every protocol,
	// each with its protocol's goodbye and reason, and returns how many
	// it closed.
	CloseClients(reason string) int
	// OpenClients counts the client connections still open.
	OpenClients() int
}

// Config is what a Drainer works on. Gate and Clients are required;
// Leaders is nil on a node without clustering.
type Config struct {
	Gate    *Gate
	Clients Clients
	Leaders Leaders
	// StateFile is the marker file of the drained state ("" keeps it in
	// memory only).
	StateFile string
	// OnChange, if set, is called after the state changed (the node
	// tells its peers by gossip).
	OnChange func(drained bool)
	Log      *slog.Logger
}

// Drainer puts the node into maintenance mode and out of it.
type Drainer struct {
	c  Config
	mu sync.Mutex // serializes Drain and Revive
}

// New returns a Drainer over c.
func New(c Config) *Drainer {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return &Drainer{c: c}
}

// Draining reports whether the node is in maintenance mode.
func (d *Drainer) Draining() bool { return d.c.Gate.Suspended() }

// Restore puts the node back into maintenance mode at start if it was
// drained when it stopped: its client listeners stay suspended until
// Revive. It reports whether it did.
func (d *Drainer) Restore() bool {
	if d.c.StateFile == "" {
		return false
	}
	if _, err := os.Stat(d.c.StateFile); err != nil {
		return false
	}
	d.c.Gate.Suspend()
	d.c.Log.Warn("node starts in maintenance mode (drained before it stopped): no client connections until revive")
	if d.c.OnChange != nil {
		d.c.OnChange(true)
	}
	return true
}

// Drain puts the node into maintenance mode: it records the state, stops
// accepting client connections, closes those open and hands over every
// Raft leadership this node holds, each bounded by ctx. The node is
// drained (listeners suspended) even when a hand-over failed; the error
// says which.
func (d *Drainer) Drain(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.c.StateFile != "" {
		if err := os.WriteFile(d.c.StateFile, []byte("drained\n"), 0o600); err != nil {
			return fmt.Errorf("drain: record the state: %w", err)
		}
	}
	d.c.Gate.Suspend()
	if d.c.OnChange != nil {
		d.c.OnChange(true)
	}
	d.c.Log.Warn("maintenance mode: client listeners suspended")
	closed := d.closeClients(ctx)
	d.c.Log.Info("maintenance mode: client connections closed", "connections", closed)
	return d.HandOver(ctx)
}

// closeClients closes the client connections, again for a moment for any
// accepted just before the listeners were suspended.
func (d *Drainer) closeClients(ctx context.Context) int {
	total := d.c.Clients.CloseClients(Reason)
	for range 5 {
		select {
		case <-ctx.Done():
			return total
		case <-time.After(100 * time.Millisecond):
		}
		total += d.c.Clients.CloseClients(Reason)
	}
	return total
}

// Revive takes the node out of maintenance mode: the client listeners
// accept again. Leaderships come back through elections or a rebalance,
// not at once.
func (d *Drainer) Revive() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.c.Gate.Resume(); err != nil {
		return err
	}
	if d.c.StateFile != "" {
		if err := os.Remove(d.c.StateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("drain: clear the state: %w", err)
		}
	}
	if d.c.OnChange != nil {
		d.c.OnChange(false)
	}
	d.c.Log.Warn("maintenance mode off: client listeners accept again")
	return nil
}

// Quiesce is a stop's first step, RabbitMQ's drain order without the
// recorded state: the client listeners stop accepting and the client
// connections close (their publishers reconnect to other nodes and
// publish again what was not confirmed), then the node's Raft
// leaderships go to other voters, bounded by ctx. The node is about to
// stop: its listeners are not resumed.
func (d *Drainer) Quiesce(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.c.Gate.Suspend()
	closed := d.c.Clients.CloseClients(ShutdownReason)
	// Until they are gone (bounded): a publish that a hand-over fails
	// must not be nacked to a client still connected, which would not
	// republish it elsewhere.
	wait, stop := time.NewTicker(20*time.Millisecond), time.After(clientsGoneWait)
	defer wait.Stop()
	for open := d.c.Clients.OpenClients(); open > 0; open = d.c.Clients.OpenClients() {
		select {
		case <-wait.C:
			continue
		case <-stop:
		case <-ctx.Done():
		}
		d.c.Log.Warn("stopping: client connections still open before the hand-over", "connections", open)
		break
	}
	d.c.Log.Info("stopping: client connections closed", "connections", closed)
	return d.HandOver(ctx)
}

// clientsGoneWait bounds Quiesce's wait for closed clients to go.
const clientsGoneWait = time.Second

// ShutdownReason is what Quiesce tells closed client connections, as
// RabbitMQ says it when it stops.
const ShutdownReason = "broker forced connection closure with reason 'shutdown'"

// handOverParallel bounds the leadership transfers in flight at once.
const handOverParallel = 16

// HandOver transfers the leadership of every Raft group this node leads
// to the most up-to-date other voter (raft.LeadershipTransfer), waiting
// for them until ctx is done. A group without another voter keeps its
// leader. It returns the transfers that failed or did not finish.
func (d *Drainer) HandOver(ctx context.Context) error {
	if d.c.Leaders == nil {
		return nil
	}
	start := time.Now()
	var (
		mu     sync.Mutex
		errs   []error
		moved  int
		wg     sync.WaitGroup
		tokens = make(chan struct{}, handOverParallel)
	)
	for _, name := range d.c.Leaders.Names() {
		r, ok := d.c.Leaders.Raft(name)
		if !ok || r.State() != raft.Leader || !hasOtherVoter(r) {
			continue
		}
		select {
		case tokens <- struct{}{}:
		case <-ctx.Done():
			mu.Lock()
			errs = append(errs, fmt.Errorf("drain: %s: %w", name, ctx.Err()))
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-tokens }()
			err := wait(ctx, r.LeadershipTransfer())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("drain: %s: %w", name, err))
				return
			}
			moved++
		}()
	}
	wg.Wait()
	d.c.Log.Info("leaderships handed over", "groups", moved, "failed", len(errs), "took", time.Since(start).Round(time.Millisecond))
	return errors.Join(errs...)
}

// hasOtherVoter reports whether r's configuration has a voter besides
// this node, which a leadership can go to.
func hasOtherVoter(r *raft.Raft) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	_, self := r.LeaderWithID()
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != self {
			return true
		}
	}
	return false
}

// wait waits for f, or for ctx (the transfer then goes on in raft,
// which bounds it by its election timeout).
func wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
