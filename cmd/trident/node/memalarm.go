package node

import (
	"bufio"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// memoryLimit is the byte limit of the memory alarm for cfg, 0 if none.
func (n *Node) memoryLimit() int64 {
	if b := n.cfg.MemoryHighWatermarkBytes; b > 0 {
		return int64(b)
	}
	p := n.cfg.MemoryHighWatermarkPercent
	if p <= 0 {
		return 0
	}
	total := totalMemory()
	if total <= 0 {
		n.log.Warn("total memory unknown: memory alarm disabled; set memory_high_watermark_bytes")
		return 0
	}
	return total * int64(p) / 100
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

// memoryInUse is the memory the Go runtime holds from the OS and has not
// released: heap, stacks and runtime structures.
func memoryInUse(s []metrics.Sample) int64 {
	metrics.Read(s)
	total := int64(s[0].Value.Uint64())
	released := int64(s[1].Value.Uint64())
	return total - released
}

// watchMemory raises and clears the broker's "memory" alarm every second
// until stop is closed. It clears at 95% of the limit, so that it does not
// flap around the watermark. Past paging (if not 0) it sets the core's
// memory pressure, under which queues page out at once.
func watchMemory(b *exchange.Broker, limit, paging int64, stop <-chan struct{}, log interface{ Warn(string, ...any) }) {
	alarms := b.Alarms()
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	raised, pressed := false, false
	for {
		used := memoryInUse(s)
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
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
