package exchange

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Broker is the core: the set of vhosts over one store.
type Broker struct {
	store Store
	log   *slog.Logger

	mu     sync.RWMutex
	vhosts map[string]*VHost
	qid    atomic.Uint64
	alarms *Alarms
	limits *Limiter

	cluster Cluster // nil when standalone
}

// Alarms returns the broker's resource alarms.
func (b *Broker) Alarms() *Alarms { return b.alarms }

// Limiter returns the broker's client limits (none until Set).
func (b *Broker) Limiter() *Limiter { return b.limits }

// New creates the core over st and recovers every durable vhost, exchange,
// queue, binding and stored message from it.
func New(st Store, log *slog.Logger) (*Broker, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Broker{store: st, log: log, vhosts: map[string]*VHost{}, alarms: newAlarms(), limits: newLimiter()}
	if err := b.recover(); err != nil {
		return nil, fmt.Errorf("exchange: recovery: %w", err)
	}
	return b, nil
}

// nextQueueID numbers a new queue. In a cluster ids are random, so that
// queues declared on different nodes never share one (a quorum queue's
// Raft group is named by it).
func (b *Broker) nextQueueID() uint64 {
	if b.cluster != nil {
		var buf [8]byte
		_, _ = rand.Read(buf[:])
		return binary.BigEndian.Uint64(buf[:])>>2 | 1<<61
	}
	return b.qid.Add(1)
}

// EnsureVHost creates the vhost if it does not exist.
// The store write happens outside b.mu: in a cluster it is a Raft round
// trip whose application on this node takes b.mu.
func (b *Broker) EnsureVHost(name string) error {
	if _, ok := b.VHost(name); ok {
		return nil
	}
	if err := b.store.PutMeta("vhost/"+name, encodeRecord(Table{})); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.vhosts[name]; !ok {
		b.vhosts[name] = newVHost(b, name)
	}
	return nil
}

// SetVHostMetadata stores a vhost's description and tags (management
// metadata; routing does not use them).
func (b *Broker) SetVHostMetadata(name, description string, tags []string) error {
	v, ok := b.VHost(name)
	if !ok {
		return errorf(KindNotFound, "no vhost '%s'", name)
	}
	t := make([]any, len(tags))
	for i, tag := range tags {
		t[i] = tag
	}
	if err := b.store.PutMeta("vhost/"+name, encodeRecord(Table{"description": description, "tags": t})); err != nil {
		return err
	}
	v.mu.Lock()
	v.description, v.tags = description, append([]string(nil), tags...)
	v.mu.Unlock()
	return nil
}

// VHost returns the named vhost.
func (b *Broker) VHost(name string) (*VHost, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	v, ok := b.vhosts[name]
	return v, ok
}

// VHosts returns the vhost names, sorted.
func (b *Broker) VHosts() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]string, 0, len(b.vhosts))
	for n := range b.vhosts {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// DeleteVHost deletes a vhost with everything in it.
func (b *Broker) DeleteVHost(name string) error {
	b.mu.Lock()
	v, ok := b.vhosts[name]
	if ok {
		delete(b.vhosts, name)
	}
	b.mu.Unlock()
	if !ok {
		return errorf(KindNotFound, "no vhost '%s'", name)
	}
	for _, q := range v.Queues() {
		_, _ = v.deleteQueue(q)
	}
	for _, x := range v.Exchanges() {
		v.lockTopology()
		_ = v.deleteExchangeLocked(x)
		_ = v.unlockTopology()
	}
	for _, p := range []string{"exchange/", "queue/", "binding/", "policy/"} {
		if err := b.store.DeleteMetaPrefix(p + name + "\x00"); err != nil {
			return err
		}
	}
	return b.store.DeleteMeta("vhost/" + name)
}

// Close records which stored messages were delivered (see redelivered.go)
// and flushes the store. The store itself is closed by its owner. Call it
// after the front ends have closed their connections.
func (b *Broker) Close() error {
	if err := b.store.Sync(); err != nil {
		return err
	}
	if err := b.saveDelivered(); err != nil {
		return err
	}
	return b.store.Sync()
}

func splitKey(key, prefix string) (vhost, rest string, ok bool) {
	k := strings.TrimPrefix(key, prefix)
	return strings.Cut(k, "\x00")
}

func (b *Broker) recover() error {
	err := b.store.LoadMeta("vhost/", func(key string, val []byte) error {
		name := strings.TrimPrefix(key, "vhost/")
		v := newVHost(b, name)
		v.description, v.tags = vhostMetadata(val)
		b.vhosts[name] = v
		return nil
	})
	if err != nil {
		return err
	}
	if err := b.loadPolicies(); err != nil {
		return err
	}
	err = b.store.LoadMeta("exchange/", func(key string, val []byte) error {
		vn, name, ok := splitKey(key, "exchange/")
		v := b.vhosts[vn]
		if !ok || v == nil {
			return nil
		}
		r, err := decodeRecord(val)
		if err != nil {
			return err
		}
		if x := exchangeFromRecord(v, name, r); x != nil {
			v.exchanges[name] = x
		}
		return nil
	})
	if err != nil {
		return err
	}
	var queues []*Queue
	err = b.store.LoadMeta("queue/", func(key string, val []byte) error {
		vn, name, ok := splitKey(key, "queue/")
		v := b.vhosts[vn]
		if !ok || v == nil {
			return nil
		}
		r, err := decodeRecord(val)
		if err != nil {
			return err
		}
		q, err := queueFromRecord(v, name, r)
		if err != nil {
			b.log.Warn("queue with bad arguments skipped", "vhost", vn, "queue", name, "err", err)
			return nil
		}
		id := q.id
		v.queues[name] = q
		queues = append(queues, q)
		if id > b.qid.Load() {
			b.qid.Store(id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = b.store.LoadMeta("binding/", func(key string, val []byte) error {
		vn, _, ok := splitKey(key, "binding/")
		v := b.vhosts[vn]
		if !ok || v == nil {
			return nil
		}
		r, err := decodeRecord(val)
		if err != nil {
			return err
		}
		src, _ := r["source"].(string)
		dst, _ := r["destination"].(string)
		dt, _ := r["destination_type"].(string)
		rk, _ := r["routing_key"].(string)
		args, _ := asTable(r["args"])
		sx, q, dx, lerr := v.lookupBind(dst, dt == "queue", src, nil)
		if lerr != nil {
			return nil // its source or destination is gone
		}
		v.addBindingLocked(&binding{src: sx, q: q, x: dx, key: rk, args: args})
		return nil
	})
	if err != nil {
		return err
	}
	clean := false
	if err := b.store.LoadMeta(cleanShutdownKey, func(string, []byte) error { clean = true; return nil }); err != nil {
		return err
	}
	delivered := map[uint64]map[uint64]bool{}
	if err := b.store.LoadMeta(deliveredPrefix, func(key string, val []byte) error {
		if id, err := strconv.ParseUint(strings.TrimPrefix(key, deliveredPrefix), 10, 64); err == nil {
			delivered[id] = decodeDelivered(val)
		}
		return nil
	}); err != nil {
		return err
	}
	// From here on a crash is not a clean shutdown.
	if err := b.store.DeleteMeta(cleanShutdownKey); err != nil {
		return err
	}
	if err := b.store.DeleteMetaPrefix(deliveredPrefix); err != nil {
		return err
	}
	var total int
	for _, q := range queues {
		seen := delivered[q.id]
		err := b.store.LoadMessages(q.id, func(seq uint64, data []byte) error {
			m, _, err := decodeMessage(data)
			if err != nil {
				b.log.Error("corrupt stored message skipped", "queue", q.name, "seq", seq, "err", err)
				return nil
			}
			if m.expiresAt != 0 {
				q.vh.anyExpiring.Store(true)
			}
			q.recoverMessage(seq, m, !clean || seen[seq])
			total++
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, q := range queues {
		q.mu.Lock()
		now := nowNano()
		q.cmdExpire(now)
		q.scheduleExpiry(now)
		q.unlock()
	}
	for _, v := range b.vhosts {
		v.mu.Lock()
		v.reapplyExchangesLocked()
		v.mu.Unlock()
		v.reapplyQueues()
	}
	b.log.Info("recovered", "vhosts", len(b.vhosts), "queues", len(queues), "messages", total)
	return nil
}
