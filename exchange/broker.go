package exchange

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

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
	// amqp10 decodes a stream's records of version 4 (streamamqp10.go);
	// nil: none are written.
	amqp10 AMQP10Decoder
	// repl writes the records a cluster shares that are not topology
	// commands (replicate.go); nil standalone.
	repl Replicator

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
