package alarm

import (
	"bufio"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// MemoryLimit is the byte limit of the memory alarm: bytes if set (RabbitMQ's
// absolute vm_memory_high_watermark), else percent of the machine's memory;
// 0 (no alarm) if neither is set or the machine's memory is unknown.
func MemoryLimit(bytes int64, percent int, log Logger) int64 {
	if bytes > 0 {
		return bytes
	}
	if percent <= 0 {
		return 0
	}
	total := totalMemory()
	if total <= 0 {
		log.Warn("total memory unknown: memory alarm disabled; set memory_high_watermark_bytes")
		return 0
	}
	return total * int64(percent) / 100
}

// totalMemory reads MemTotal from /proc/meminfo (bytes), or 0.
func totalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// The memory alarm measures live memory: the heap the last garbage
// collection found live, plus what the runtime holds outside the heap
// (stacks, metadata, the unused parts of its spans). Heap that is free but
// not yet returned to the OS, and garbage not yet collected, are not
// counted: the alarm would otherwise stay raised for minutes after the load
// is gone (the runtime returns free memory slowly and, with publishers
// blocked, collects rarely). Two things keep the resident size near the
// measure:
//   - the runtime's soft memory limit (GOMEMLIMIT) is set to the watermark,
//     unless the environment sets it, so that the collector runs as often
//     as needed to keep the heap with its garbage under it (the alarm
//     blocks publishers before what is live reaches it);
//   - the store pages its mapped value-log files out past a share of the
//     watermark (StoreTrim);
//   - while the alarm is raised the watcher collects and returns free memory
//     to the OS (debug.FreeOSMemory) every freeEvery, so that the measure
//     follows what is really live and the alarm clears within seconds of the
//     load going away;
//   - after a burst, once the heap has stopped growing, the watcher
//     collects the burst's garbage and returns it (idleGiveBack): a process
//     that no longer allocates starts no collection of its own (the
//     runtime's forced one comes every two minutes), so the resident size
//     would stay at the burst's peak while, say, 18,000 idle devices stay
//     connected.

const (
	// memCheckEvery is how often the watcher reads the runtime's metrics
	// (a cheap read: no stop-the-world).
	memCheckEvery = 100 * time.Millisecond
	// freeEvery is how often a raised alarm collects and returns memory.
	freeEvery = 2 * time.Second
	// minSoftLimit: below this watermark (a test's way to raise the alarm
	// at once) the runtime's soft limit is left alone.
	minSoftLimit = 64 << 20
	// idleQuiet is how long the heap must not have grown (by more than
	// idleSlack) before its garbage is given back; idleGarbage the least
	// garbage worth it (and at least an eighth of the live heap: a
	// collection costs in proportion to what is live); idleEvery the least
	// time between two give-backs. After the fleet's bursts (18,000
	// devices) 5–10 MiB of garbage stayed next to ~75 MiB live, 5–10% of
	// the resident size, until the runtime's two-minute collection.
	idleQuiet   = 2 * time.Second
	idleSlack   = 1 << 20
	idleGarbage = 4 << 20
	idleEvery   = 10 * time.Second
)

// idleGiveBack decides when a heap that stopped growing has its garbage
// collected and returned to the OS.
type idleGiveBack struct {
	base  int64     // the heap's objects when it last grew (or shrank: a collection)
	since time.Time // when it last grew
	freed time.Time // the last give-back
}

// due reports, for the heap's allocated objects and the live heap of the
// last collection read at now, whether to give the garbage back now.
func (g *idleGiveBack) due(now time.Time, objects, live int64) bool {
	switch {
	case objects > g.base+idleSlack || g.since.IsZero():
		g.base, g.since = objects, now
		return false
	case objects < g.base:
		g.base = objects // collected since
	}
	garbage := objects - live
	if now.Sub(g.since) < idleQuiet || now.Sub(g.freed) < idleEvery || garbage < idleGarbage || garbage < live/8 {
		return false
	}
	g.freed = now
	return true
}

// StoreTrim is how the store drops its value log's mapped pages from the
// process under a memory limit: once they hold more than an eighth of
// limit (at least 32 MiB, at most maxAbove, the store's default), looked
// at ten times a second (a flood of persistent messages maps ~100 MB/s of
// value log; at 64 MiB and four times a second a 400 MB watermark's
// resident peak was 486–508 MB, measured): a backlog paged to the store
// then does not stay resident as file-backed pages, which the process's
// resident size counts. ok is false without a limit (the store's defaults
// stand). The node sets the store's options from it
// (store.BadgerOptions.TrimAbove, TrimInterval).
func StoreTrim(limit, maxAbove int64) (above int64, every time.Duration, ok bool) {
	if limit <= 0 {
		return 0, 0, false
	}
	return min(max(limit/8, 32<<20), maxAbove), 100 * time.Millisecond, true
}

// memSamples are the runtime metrics memoryInUse reads, in this order.
var memSamples = []string{
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/live:bytes",
}

// memoryInUse is the live memory of the process as the alarm measures it:
// everything the runtime holds from the OS but free heap and garbage; and
// the heap's allocated objects and the live heap of the last collection.
func memoryInUse(s []metrics.Sample) (used, objects, live int64) {
	metrics.Read(s)
	v := func(i int) int64 { return int64(s[i].Value.Uint64()) }
	total, released, free := v(0), v(1), v(2)
	objects, live = v(3), v(4)
	garbage := max(objects-live, 0)
	return total - released - free - garbage, objects, live
}

// softLimits are the soft memory limits the nodes of this process asked
// for; the runtime's is the largest of them, and goes back to what it was
// when the last node stops.
var softLimits struct {
	sync.Mutex
	active map[*int64]int64
	before int64
}

// setSoftLimit sets the runtime's soft memory limit to at least limit
// until the returned function is called; it does nothing if the
// environment sets GOMEMLIMIT or limit is under minSoftLimit.
func setSoftLimit(limit int64) (restore func()) {
	if os.Getenv("GOMEMLIMIT") != "" || limit < minSoftLimit {
		return func() {}
	}
	key := new(int64)
	apply := func() {
		if len(softLimits.active) == 0 {
			debug.SetMemoryLimit(softLimits.before)
			softLimits.active = nil
			return
		}
		var m int64
		for _, l := range softLimits.active {
			m = max(m, l)
		}
		debug.SetMemoryLimit(m)
	}
	softLimits.Lock()
	if softLimits.active == nil {
		softLimits.active = map[*int64]int64{}
		softLimits.before = debug.SetMemoryLimit(-1)
	}
	softLimits.active[key] = limit
	apply()
	softLimits.Unlock()
	return func() {
		softLimits.Lock()
		delete(softLimits.active, key)
		apply()
		softLimits.Unlock()
	}
}

// WatchMemory raises and clears the broker's "memory" alarm until stop is
// closed. It clears at 95% of the limit, so that it does not flap around
// the watermark. Past paging (if not 0) it sets the core's memory
// pressure, under which queues page out at once.
func WatchMemory(b *exchange.Broker, limit, paging int64, stop <-chan struct{}, log Logger) {
	defer setSoftLimit(limit)()
	alarms := b.Alarms()
	s := make([]metrics.Sample, len(memSamples))
	for i, name := range memSamples {
		s[i].Name = name
	}
	t := time.NewTicker(memCheckEvery)
	defer t.Stop()
	raised, pressed := false, false
	var freed time.Time
	var idle idleGiveBack
	for {
		used, objects, live := memoryInUse(s)
		if !raised && idle.due(time.Now(), objects, live) {
			debug.FreeOSMemory()
		}
		switch {
		case paging > 0 && !pressed && used > paging:
			pressed = true
			log.Warn("memory above the paging threshold: queues page out", "used", used, "threshold", paging)
			b.SetMemoryPressure(true)
		case pressed && used < paging*95/100:
			pressed = false
			b.SetMemoryPressure(false)
		}
		switch {
		case !raised && used > limit:
			raised = true
			log.Warn("memory alarm raised: publishers are blocked", "used", used, "limit", limit)
			alarms.Set("memory", true)
		case raised && used < limit*95/100:
			raised = false
			log.Warn("memory alarm cleared", "used", used, "limit", limit)
			alarms.Set("memory", false)
		case raised && time.Since(freed) >= freeEvery:
			// Collect what the load left behind and give it back: the
			// measure then drops as soon as the memory is no longer live.
			debug.FreeOSMemory()
			freed = time.Now()
			continue
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
