package exchange

import (
	"strconv"
	"strings"
)

// Delayers at start and stop: recovery of the held messages from the
// store, and the stop at broker close.

// recoverStored reads a delayer's stored messages at start: it
// counts them, drops the transient ones (a restart loses them, as a
// queue's), and fills the window with the earliest.
func (d *delayer) recoverStored() error { return d.s.Recover() }

// recoverDelayed starts the delayers of the recovered delayed exchanges and
// drops the stored messages of delayed exchanges that are gone (deleted
// while their messages were being dropped, or not durable).
func (b *Broker) recoverDelayed() error {
	live := map[uint64]bool{}
	for _, v := range b.vhosts {
		for _, x := range v.exchanges {
			if x.delay == nil {
				continue
			}
			live[x.delay.id] = true
			if x.delay.id > b.qid.Load() {
				b.qid.Store(x.delay.id)
			}
			if err := x.delay.recoverStored(); err != nil {
				return err
			}
		}
	}
	for _, v := range b.vhosts {
		d := newRetryDelayer(v)
		if err := d.recoverStored(); err != nil {
			return err
		}
		if d.s.Held() > 0 {
			d.start()
			v.retryD.Store(d)
		}
	}
	var gone []string
	if err := b.store.LoadMeta(delayRegistryPrefix, func(key string, _ []byte) error {
		id, err := strconv.ParseUint(strings.TrimPrefix(key, delayRegistryPrefix), 10, 64)
		if err == nil && !live[id] {
			if err := b.store.DropMessages(id); err != nil {
				return err
			}
			gone = append(gone, key)
		}
		if id > b.qid.Load() {
			b.qid.Store(id)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range gone {
		if err := b.store.DeleteMeta(k); err != nil {
			return err
		}
	}
	for _, v := range b.vhosts {
		for _, x := range v.exchanges {
			if x.delay != nil {
				x.delay.start()
			}
		}
	}
	return nil
}

// stopDelayers stops every delayer and waits for them (at broker close;
// their stored messages stay for the next start).
func (b *Broker) stopDelayers() {
	var ds []*delayer
	b.mu.RLock()
	for _, v := range b.vhosts {
		v.mu.RLock()
		for _, x := range v.exchanges {
			if x.delay != nil {
				ds = append(ds, x.delay)
			}
		}
		v.mu.RUnlock()
		if d := v.retryD.Load(); d != nil {
			ds = append(ds, d)
		}
	}
	b.mu.RUnlock()
	for _, d := range ds {
		d.stop(false)
	}
	for _, d := range ds {
		<-d.s.Done()
	}
}
