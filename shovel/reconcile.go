package shovel

import (
	"time"
)

// reconcileEvery is how often a manager with an owner function looks
// again at which shovels it should run (membership changes).
const reconcileEvery = 2 * time.Second

// SetOwner makes the manager run only the shovels owner says are this
// node's (self), and look again every reconcileEvery. owner must not
// block; node names the owner, for the status of shovels running there.
func (m *Manager) SetOwner(owner func(key string) (self bool, node string)) {
	m.mu.Lock()
	first := m.owner == nil
	m.owner = owner
	m.mu.Unlock()
	if first {
		go m.reconcileLoop()
	}
	m.nudge()
}

func (m *Manager) nudge() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *Manager) reconcileLoop() {
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
		case <-m.kick:
		}
		m.reconcile()
	}
}

// ownsLocked reports whether this node runs key.
func (m *Manager) ownsLocked(key string) bool {
	if m.owner == nil {
		return true
	}
	if sd := m.defs[key]; sd != nil && sd.static {
		return true
	}
	self, _ := m.owner(key)
	return self
}

// reconcile starts the shovels this node owns and stops the others.
func (m *Manager) reconcile() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	var stop []*worker
	for k, sd := range m.defs {
		own := m.ownsLocked(k)
		switch {
		case own && sd.w == nil:
			m.startLocked(sd)
		case !own && sd.w != nil:
			m.log.Info("shovel moves to another node", "vhost", sd.rec.VHost, "shovel", sd.rec.Name)
			stop = append(stop, sd.w)
			sd.w = nil
		}
	}
	m.mu.Unlock()
	for _, w := range stop {
		w.cancel()
		<-w.done
	}
}
