package exchange

import (
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func splitKey(key, prefix string) (vhost, rest string, ok bool) {
	k := strings.TrimPrefix(key, prefix)
	return strings.Cut(k, "\x00")
}

// replayAll replays every record of kind under prefix, in key order; one
// that fails stops the start with an error naming it.
func (b *Broker) replayAll(kind, prefix string) error {
	return b.store.LoadMeta(prefix, func(key string, val []byte) error {
		if _, err := b.replayRecord(kind, prefix, key, val); err != nil {
			return &RecordError{Key: key, Err: err}
		}
		return nil
	})
}

func (b *Broker) recover() error {
	// Every topology record is replayed as the command that made it,
	// through the apply committed commands take (toporecover.go).
	err := b.replayAll(recVHost, "vhost/")
	if err != nil {
		return err
	}
	// Policies before what they apply to; one this version refuses is
	// skipped with a warning (its record stays).
	for _, k := range []struct{ kind, prefix, what string }{
		{recPolicy, "policy/", "invalid policy record skipped"},
		{recOpPolicy, opPolicyPrefix, "invalid operator policy record skipped"},
	} {
		err = b.store.LoadMeta(k.prefix, func(key string, val []byte) error {
			if c, err := b.replayRecord(k.kind, k.prefix, key, val); err != nil {
				b.log.Warn(k.what, "vhost", c.VHost, "policy", c.Name, "err", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	// A queue deleted while its messages were being dropped (a crash
	// then) left them behind: its id is not numbered again.
	if s, ok := b.store.(interface {
		MaxQueueID(below uint64) (uint64, error)
	}); ok {
		id, err := s.MaxQueueID(1 << 61)
		if err != nil {
			return err
		}
		if id > b.qid.Load() {
			b.qid.Store(id)
		}
	}
	// Then exchanges, queues, and the bindings between them. A record
	// that does not decode, or an exchange of a type this node lacks,
	// stops the start with an error naming it; a queue whose arguments
	// this version refuses is skipped with a warning (its record stays,
	// for a version that takes it).
	err = b.replayAll(recExchange, "exchange/")
	if err != nil {
		return err
	}
	var queues []*Queue
	err = b.store.LoadMeta("queue/", func(key string, val []byte) error {
		if _, err := decodeRecord(val); err != nil {
			return &RecordError{Key: key, Err: err}
		}
		c, err := b.replayRecord(recQueue, "queue/", key, val)
		if err != nil {
			b.log.Warn("queue with bad arguments skipped", "vhost", c.VHost, "queue", c.Name, "err", err)
			return nil
		}
		v, ok := b.VHost(c.VHost)
		if !ok {
			return nil
		}
		v.mu.RLock()
		q := v.queues[c.Name]
		v.mu.RUnlock()
		if q == nil {
			return nil
		}
		queues = append(queues, q)
		if q.id > b.qid.Load() {
			b.qid.Store(q.id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = b.replayAll(recBinding, "binding/")
	if err != nil {
		return err
	}
	clean := false
	if err := b.store.LoadMeta(cleanShutdownKey, func(string, []byte) error { clean = true; return nil }); err != nil {
		return err
	}
	delivered := map[uint64]map[uint64]bool{}
	upto := map[uint64]uint64{}
	if err := b.store.LoadMeta(deliveredPrefix, func(key string, val []byte) error {
		if key == deliveredAllKey {
			decodeDeliveredAll(val, delivered, upto)
			return nil
		}
		// One key per queue: what a clean stop of an older version wrote.
		if id, err := strconv.ParseUint(strings.TrimPrefix(key, deliveredPrefix), 10, 64); err == nil {
			delivered[id] = decodeDelivered(val)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := b.recoverStreams(queues); err != nil {
		return err
	}
	// A stream's keys are offsets, not a classic queue's (whose odd keys
	// are transient pages that a start drops): streams stay out of the
	// key recovery below.
	queues = slices.DeleteFunc(queues, func(q *Queue) bool { return q.st != nil })
	if err := b.migrateMessageKeys(queues); err != nil {
		return err
	}
	// From here on a crash is not a clean shutdown.
	if err := b.store.DeleteMeta(cleanShutdownKey); err != nil {
		return err
	}
	if err := b.store.DeleteMetaPrefix(deliveredPrefix); err != nil {
		return err
	}
	// Keys only: bodies are read as consumers reach them (page.go).
	scanned := time.Now()
	total, err := b.recoverKeys(queues, runtime.GOMAXPROCS(0), !clean, delivered, upto)
	if err != nil {
		return err
	}
	for _, q := range queues {
		if q.a.messageTTL < 0 {
			continue // per-message expiry is seen as messages reach the head
		}
		q.mu.Lock()
		now := nowNano()
		q.cmdExpire(now)
		q.scheduleExpiry(now)
		q.unlock()
	}
	if err := b.recoverDelayed(); err != nil {
		return err
	}
	for _, v := range b.vhosts {
		v.mu.Lock()
		v.reapplyExchangesLocked()
		v.mu.Unlock()
		v.reapplyQueues()
	}
	b.log.Info("recovered", "vhosts", len(b.vhosts), "queues", len(queues), "messages", total,
		"key scan", time.Since(scanned).Round(time.Millisecond))
	return nil
}

// storeFormatKey holds the layout of message keys: absent (the first
// layout, keyed by seq alone) or 2 (page.go: lane, seq and page flag).
const storeFormatKey = "store/format"

// migrateMessageKeys rewrites the messages of a store written with the
// first key layout into the current one, once. It reads every message, so
// it is slow for a large backlog, and only ever runs on an old data dir.
func (b *Broker) migrateMessageKeys(queues []*Queue) error {
	format := 0
	if err := b.store.LoadMeta(storeFormatKey, func(_ string, v []byte) error {
		if len(v) > 0 {
			format = int(v[0])
		}
		return nil
	}); err != nil {
		return err
	}
	if format >= 2 {
		return nil
	}
	moved := 0
	for _, q := range queues {
		if q.xa.quorum {
			continue
		}
		type rec struct {
			seq  uint64
			data []byte
			m    *Message
		}
		var all []rec
		if err := b.store.LoadMessages(q.id, func(seq uint64, data []byte) error {
			m, _, err := decodeMessage(data)
			if err != nil {
				b.log.Error("corrupt stored message skipped", "queue", q.name, "seq", seq, "err", err)
				return nil
			}
			all = append(all, rec{seq, data, m})
			return nil
		}); err != nil {
			return err
		}
		if len(all) == 0 {
			continue
		}
		if err := b.store.DropMessages(q.id); err != nil {
			return err
		}
		for _, r := range all {
			e := entry{msg: r.m, seq: r.seq}
			b.store.AppendMessage(q.id, q.storeKey(&e), r.data, nil)
		}
		moved += len(all)
	}
	if err := b.store.Sync(); err != nil {
		return err
	}
	if moved > 0 {
		b.log.Info("stored messages rewritten to the current key layout", "messages", moved)
	}
	return b.store.PutMeta(storeFormatKey, []byte{2})
}
