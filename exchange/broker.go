package exchange

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/exchange/event"
)

// Broker is the core: the set of vhosts over one store.
type Broker struct {
	store Store
	log   *slog.Logger
	churn Churn // churn.go

	roundNow atomic.Int64 // StoreRound: the running store round's start, or 0

	mu     sync.RWMutex
	vhosts map[string]*VHost
	qid    atomic.Uint64
	alarms *Alarms
	limits *Limiter

	cluster Cluster // nil when standalone

	// proposer replicates topology commands in a cluster (topocluster.go).
	proposer atomic.Pointer[proposerBox]
	// onApply, if set (tests), sees every command VHost.Apply applies.
	onApply func(TopologyCommand)

	// events is the event bus; eventVHost the vhost EventExchange is
	// predeclared in (events.go). Set before recovery.
	events     *event.Bus
	eventVHost string

	// recovering is set while recover replays the stored records through
	// the apply path: installing an exchange or queue then leaves its
	// policy and its delayer to the end of the recovery, once messages
	// are loaded (written before any other goroutine runs).
	recovering bool

	// Paging (page.go): the default in-memory window of a queue lane,
	// and memory pressure (set by the node's memory watch), under which
	// queues page out at once.
	windowMsgs, windowBytes atomic.Int64
	memPressure             atomic.Bool
	memUsed, memBudget      atomic.Int64 // message bodies queues hold in memory, and the most they may

	unreadableMu sync.Mutex
	unreadable   map[string]int // "vhost/queue" → stored messages that could not be read
}

// noteUnreadable records n stored messages of q that could not be read
// back (corrupt or missing): the health check reports them.
func (b *Broker) noteUnreadable(q *Queue, n int) {
	b.unreadableMu.Lock()
	defer b.unreadableMu.Unlock()
	if b.unreadable == nil {
		b.unreadable = map[string]int{}
	}
	b.unreadable[q.vh.name+"/"+q.name] += n
}

// UnreadableMessages returns, per "vhost/queue", how many stored messages
// could not be read back since start (they were logged and dropped).
func (b *Broker) UnreadableMessages() map[string]int {
	b.unreadableMu.Lock()
	defer b.unreadableMu.Unlock()
	out := make(map[string]int, len(b.unreadable))
	for k, v := range b.unreadable {
		out[k] = v
	}
	return out
}

// SetQueueWindow sets the default in-memory window of every classic
// queue (per priority level): at most msgs messages and bytes body bytes
// are kept in memory at its head; the rest of its backlog is in the store.
// Zero or negative values keep the built-in default (32768 messages, 8 MiB).
func (b *Broker) SetQueueWindow(msgs int, bytes int64) {
	if msgs <= 0 {
		msgs = defaultWindowMsgs
	}
	if bytes <= 0 {
		bytes = defaultWindowBytes
	}
	b.windowMsgs.Store(int64(msgs))
	b.windowBytes.Store(bytes)
}

// SetQueueMemoryBudget bounds the message bodies all queues together keep
// in memory: past it, queues keep no new message in memory and a queue
// without consumers pages out what it holds, as under memory pressure.
// Zero or negative keeps the built-in default (256 MiB).
func (b *Broker) SetQueueMemoryBudget(bytes int64) {
	if bytes <= 0 {
		bytes = defaultMemBudget
	}
	b.memBudget.Store(bytes)
}

// QueueMemory returns the message bodies queues hold in memory (counted in
// steps of 256 bytes per queue) and the budget for them.
func (b *Broker) QueueMemory() (used, budget int64) { return b.memUsed.Load(), b.memBudget.Load() }

// SetMemoryPressure tells the core that the node is short of memory (the
// node's memory watch sets it past a share of the memory alarm's limit):
// while it is set, queues keep no new messages in memory and a queue
// without consumers pages out what it holds.
func (b *Broker) SetMemoryPressure(on bool) { b.memPressure.Store(on) }

// MessageStore is the node's store of messages: a quorum queue's FSM keeps
// its queue's messages there, under the keys the queue reads them by.
func (b *Broker) MessageStore() Store { return b.store }

// Alarms returns the broker's resource alarms.
func (b *Broker) Alarms() *Alarms { return b.alarms }

// Limiter returns the broker's client limits (none until Set).
func (b *Broker) Limiter() *Limiter { return b.limits }

// New creates the core over st and recovers every durable vhost, exchange,
// queue, binding and stored message from it.
func New(st Store, log *slog.Logger, opts ...Option) (*Broker, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Broker{store: st, log: log, vhosts: map[string]*VHost{}, alarms: NewAlarms(), limits: newLimiter()}
	b.SetQueueWindow(0, 0)
	b.SetQueueMemoryBudget(0)
	b.initEvents(opts)
	b.recovering = true
	err := b.recover()
	b.recovering = false
	if err != nil {
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
	_, err := b.Apply(TopologyCommand{Op: TopoDeclareVHost, VHost: name})
	return err
}

// applyEnsureVHost applies a vhost.declare command standalone (or on the
// records path of a cluster).
func (b *Broker) applyEnsureVHost(name string) error {
	if _, ok := b.VHost(name); ok {
		return nil
	}
	if err := checkName("vhost", name); err != nil {
		return err
	}
	if err := b.store.PutMeta("vhost/"+name, encodeRecord(Table{})); err != nil {
		return err
	}
	b.mu.Lock()
	_, ok := b.vhosts[name]
	if !ok {
		b.vhosts[name] = newVHost(b, name)
	}
	b.mu.Unlock()
	if !ok && b.events.On() {
		b.events.Emit(event.VHostCreated, event.Prop{Key: "name", Value: name})
	}
	return nil
}

// SetVHostMetadata stores a vhost's description and tags (management
// metadata; routing does not use them).
func (b *Broker) SetVHostMetadata(name, description string, tags []string) error {
	_, err := b.Apply(TopologyCommand{Op: TopoSetVHostMeta, VHost: name, Description: description, Tags: tags})
	return err
}

// applySetVHostMetadata applies a vhost.set-metadata command standalone.
func (b *Broker) applySetVHostMetadata(name, description string, tags []string) error {
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
//
// In a cluster the vhost's record is deleted first: the vhost goes when
// that is committed and applied, here as on every node (applyVHost), and
// a delete that does not commit leaves it as it was. The records of what
// it held are deleted after (what a failure there leaves names a vhost
// that is gone, and recovery skips it).
func (b *Broker) DeleteVHost(name string) error {
	_, err := b.Apply(TopologyCommand{Op: TopoDeleteVHost, VHost: name})
	return err
}

// applyDeleteVHost applies a vhost.delete command standalone (or on the
// records path of a cluster).
func (b *Broker) applyDeleteVHost(name string) error {
	if v, ok := b.VHost(name); ok && v.sharedMeta() {
		if err := b.store.DeleteMeta("vhost/" + name); err != nil {
			return errorf(KindInternal, "store: %v", err)
		}
		if cur, ok := b.VHost(name); !ok || cur != v {
			return b.deleteVHostRecords(name)
		}
		// The record was this node's alone: delete as standalone.
	}
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
	v.stopRetries()
	for _, x := range v.Exchanges() {
		v.lockTopology()
		_ = v.deleteExchangeLocked(x)
		_ = v.unlockTopology()
	}
	if b.events.On() {
		b.events.Emit(event.VHostDeleted, event.Prop{Key: "name", Value: name})
	}
	if err := b.deleteVHostRecords(name); err != nil {
		return err
	}
	return b.store.DeleteMeta("vhost/" + name)
}

// stopRetries stops the vhost's retry delayer and drops what it held.
func (v *VHost) stopRetries() {
	if d := v.retryD.Load(); d != nil {
		d.stop(true)
	} else {
		_ = v.b.store.DropMessages(retryStoreID(v.name))
	}
}

// deleteVHostRecords deletes the records of what vhost name held.
func (b *Broker) deleteVHostRecords(name string) error {
	for _, p := range []string{"exchange/", "queue/", "binding/", "policy/", opPolicyPrefix} {
		if err := b.store.DeleteMetaPrefix(p + name + "\x00"); err != nil {
			return err
		}
	}
	return nil
}

// Close records which stored messages were delivered (see redelivered.go)
// and flushes the store. The store itself is closed by its owner. Call it
// after the front ends have closed their connections.
func (b *Broker) Close() error {
	b.stopDelayers()
	b.closeStreams()
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
	// Every topology record is replayed as the command that made it,
	// through the apply committed commands take (toporecover.go).
	err := b.store.LoadMeta("vhost/", func(key string, val []byte) error {
		if _, err := b.replayRecord(recVHost, "vhost/", key, val); err != nil {
			return &RecordError{Key: key, Err: err}
		}
		return nil
	})
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
	err = b.store.LoadMeta("exchange/", func(key string, val []byte) error {
		if _, err := b.replayRecord(recExchange, "exchange/", key, val); err != nil {
			return &RecordError{Key: key, Err: err}
		}
		return nil
	})
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
	err = b.store.LoadMeta("binding/", func(key string, val []byte) error {
		if _, err := b.replayRecord(recBinding, "binding/", key, val); err != nil {
			return &RecordError{Key: key, Err: err}
		}
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
