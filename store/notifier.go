package store

func (b *Badger) runNotifier() {
	defer close(b.notifyDone)
	var q []*batch
	for {
		b.notifyMu.Lock()
		for len(b.notifyQ) == 0 && !b.notifyStop {
			b.notifyCond.Wait()
		}
		if len(b.notifyQ) == 0 {
			b.notifyMu.Unlock()
			return
		}
		q, b.notifyQ = b.notifyQ, q[:0]
		b.notifyMu.Unlock()
		hook := b.rounds.Load()
		if hook != nil {
			(*hook)(true)
		}
		for _, c := range q {
			b.callbacks(c)
			b.recycle(c)
		}
		if hook != nil {
			(*hook)(false)
		}
		clear(q)
	}
}

// OnRounds sets a hook told (true) before and (false) after each round of
// done callbacks the notifier runs: one or more commits' callbacks back to
// back on one goroutine. The core reads its clock once per round rather
// than once per confirm (exchange.Broker.StoreRound). Set it once, before
// or while the store runs.
func (b *Badger) OnRounds(hook func(begin bool)) { b.rounds.Store(&hook) }

func (b *Badger) callbacks(c *batch) {
	var appends uint64
	for i := range c.ops {
		o := &c.ops[i]
		switch {
		case o.wait != nil:
			o.wait <- c.err
		case o.done != nil:
			o.done(c.err)
		}
		if o.kind == opAppend && !c.early {
			appends++
		}
	}
	if c.err == nil {
		b.stats.appends.Add(appends)
	}
}
