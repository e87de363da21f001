package exchange

import (
	"time"
)

// deadLetter republishes m from queue q to q's dead-letter exchange with an
// x-death header as RabbitMQ writes it.
func (v *VHost) deadLetter(q *Queue, d deadLetter) {
	m, reason := d.msg, d.reason
	nm := &Message{Exchange: d.dlx, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body}
	if d.hasDLRK {
		nm.RoutingKey = d.dlrk
	}
	h := make(Table, len(m.Props.Headers)+4)
	for k, val := range m.Props.Headers {
		h[k] = val
	}
	now := time.Now().UTC().Truncate(time.Second)
	entry := Table{
		"count":        int64(1),
		"reason":       reason,
		"queue":        q.name,
		"time":         now,
		"exchange":     m.Exchange,
		"routing-keys": []any{m.RoutingKey},
	}
	if m.Props.Expiration != "" {
		entry["original-expiration"] = m.Props.Expiration
		nm.Props.Expiration = ""
	}
	deaths, _ := h["x-death"].([]any)
	rest := make([]any, 0, len(deaths)+1)
	for _, d := range deaths {
		t, ok := asTable(d)
		if ok && t["queue"] == q.name && t["reason"] == reason {
			n, _ := asInt64(t["count"])
			entry["count"] = n + 1
			continue
		}
		rest = append(rest, d)
	}
	h["x-death"] = append([]any{entry}, rest...)
	if _, ok := h["x-first-death-reason"]; !ok {
		h["x-first-death-reason"] = reason
		h["x-first-death-queue"] = q.name
		h["x-first-death-exchange"] = m.Exchange
	}
	h["x-last-death-reason"] = reason
	h["x-last-death-queue"] = q.name
	h["x-last-death-exchange"] = m.Exchange
	nm.Props.Headers = h
	nowNs := nowNano()
	nm.ts = nowNs
	nm.expiresAt = 0
	// Cycle detection: a message that would come back to a queue it died
	// in, with no rejection on the way, is dropped (as RabbitMQ does).
	rejected := false
	for _, d := range h["x-death"].([]any) {
		if t, ok := asTable(d); ok && t["reason"] == "rejected" {
			rejected = true
		}
	}
	skip := func(target *Queue) bool {
		if rejected {
			return false
		}
		for _, d := range h["x-death"].([]any) {
			if t, ok := asTable(d); ok && t["queue"] == target.name {
				return true
			}
		}
		return false
	}
	v.mu.RLock()
	_, ok := v.exchanges[nm.Exchange]
	v.mu.RUnlock()
	if !ok {
		return
	}
	_, _ = v.publish(nm, PublishOpts{}, nowNs, skip)
}

// deadLetter is a message to dead-letter once q.mu is released, with the
// queue's dead-letter settings at the time.
type deadLetter struct {
	msg     *Message
	reason  string
	dlx     string
	dlrk    string
	hasDLRK bool
}

// deadLetter drops e, dead-lettering it if the queue has a DLX.
func (s *queueState) deadLetter(e entry, reason string) {
	s.dropStored(&e)
	if s.a.hasDLX {
		m := s.fx.more()
		m.dl = append(m.dl, deadLetter{msg: e.msg, reason: reason,
			dlx: s.a.dlx, dlrk: s.a.dlrk, hasDLRK: s.a.hasDLRK})
	}
}

// deadLetterLocked is the state's deadLetter, for Queue's callers.
func (q *Queue) deadLetterLocked(e entry, reason string) { q.deadLetter(e, reason) }
