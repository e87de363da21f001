package jepsen

import (
	"fmt"
	"sort"
	"strings"
)

// Result is the verdict of Check on a History.
//
// The anomalies (must be empty for a correct broker):
//   - Lost: confirmed (publish-ok) and never delivered.
//   - BadDuplicates: delivered more than once without the redelivered flag
//     (only a message's first delivery may lack it; as deliveries to
//     different connections can be recorded out of the broker's order,
//     the rule counts unflagged deliveries rather than asking which came
//     first).
//   - Phantoms: delivered but never published.
//   - Corrupt: delivered with a body that differs from the message-id.
//
// Allowed, and counted: duplicate deliveries flagged redelivered
// (at-least-once), and deliveries of messages that were nacked or whose
// publish was indeterminate.
type Result struct {
	Published     int // distinct ids with a publish-invoke
	Confirmed     int // ... and a publish-ok
	Nacked        int // ... and a definite publish-fail (basic.nack)
	Indeterminate int // ... with an indeterminate publish-fail, or no outcome at all

	Delivered  int // distinct ids delivered
	Deliveries int // deliveries, duplicates included
	AcksSent   int // ack-sent operations

	// Redelivered counts deliveries after the first of the same id that
	// carried the redelivered flag (allowed).
	Redelivered int
	// RedeliveredAfterAck counts the deliveries among Redelivered that came
	// after the client had sent an ack for the id (allowed: an ack in flight
	// when a broker dies may be lost, but worth watching).
	RedeliveredAfterAck int
	// UnconfirmedDelivered counts distinct ids delivered that were nacked
	// or indeterminate (allowed).
	UnconfirmedDelivered int
	// FlaggedFirst counts first deliveries that carried the redelivered
	// flag (allowed: the flag only says the message may have been
	// delivered before).
	FlaggedFirst int

	// NemesisEvents counts Kill, Restart, Partition and Heal operations,
	// and Info operations of the process "nemesis".
	NemesisEvents int
	// Drained reports whether the history ends with a final drain. Without
	// it Lost is meaningless, and Err reports it.
	Drained bool

	Lost          []string
	BadDuplicates []string
	Phantoms      []string
	Corrupt       []string
}

// Valid reports whether the history has a final drain and no anomaly.
func (r Result) Valid() bool { return r.Err() == nil }

// Err describes the anomalies, or returns nil when there is none.
func (r Result) Err() error {
	var probs []string
	if !r.Drained {
		probs = append(probs, "no final drain in the history")
	}
	add := func(name string, ids []string) {
		if len(ids) == 0 {
			return
		}
		show := ids
		if len(show) > 20 {
			show = show[:20]
		}
		probs = append(probs, fmt.Sprintf("%d %s: %s", len(ids), name, strings.Join(show, " ")))
	}
	add("lost", r.Lost)
	add("bad duplicates", r.BadDuplicates)
	add("phantoms", r.Phantoms)
	add("corrupt", r.Corrupt)
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("jepsen: %s", strings.Join(probs, "; "))
}

// String is a one-line summary of the counts.
func (r Result) String() string {
	return fmt.Sprintf("published=%d confirmed=%d nacked=%d indeterminate=%d delivered=%d deliveries=%d acks=%d "+
		"redelivered=%d redelivered-after-ack=%d flagged-first=%d unconfirmed-delivered=%d nemesis=%d drained=%v "+
		"lost=%d bad-duplicates=%d phantoms=%d corrupt=%d",
		r.Published, r.Confirmed, r.Nacked, r.Indeterminate, r.Delivered, r.Deliveries, r.AcksSent,
		r.Redelivered, r.RedeliveredAfterAck, r.FlaggedFirst, r.UnconfirmedDelivered, r.NemesisEvents, r.Drained,
		len(r.Lost), len(r.BadDuplicates), len(r.Phantoms), len(r.Corrupt))
}

// outcome of one publish.
type outcome int

const (
	pending outcome = iota // invoked, no outcome recorded
	confirmed
	nacked
	unknown
)

// Check analyses a history. Operations are taken in Seq order; h need not be
// sorted. The id lists in the result are sorted.
func Check(h History) Result {
	ops := append(History(nil), h...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Seq < ops[j].Seq })

	var r Result
	published := map[string]outcome{}
	delivered := map[string]int{}  // id -> deliveries so far
	fresh := map[string]int{}      // id -> deliveries without the redelivered flag
	seenBy := map[[2]string]bool{} // (id, consumer process) delivered before
	acked := map[string]bool{}
	bad := map[string]bool{}
	phantom := map[string]bool{}
	corrupt := map[string]bool{}

	for _, op := range ops {
		switch op.Kind {
		case PublishInvoke:
			if _, ok := published[op.ID]; !ok {
				published[op.ID] = pending
			}
		case PublishOK:
			published[op.ID] = confirmed
		case PublishFail:
			if published[op.ID] == confirmed {
				break // a later failure cannot undo a confirm
			}
			if op.Indeterminate {
				published[op.ID] = unknown
			} else {
				published[op.ID] = nacked
			}
		case Deliver:
			r.Deliveries++
			if op.Corrupt {
				corrupt[op.ID] = true
			}
			if _, ok := published[op.ID]; !ok {
				phantom[op.ID] = true
			}
			n := delivered[op.ID]
			delivered[op.ID] = n + 1
			// Two deliveries to consumers on different connections may be
			// recorded in the opposite order to the broker's, so the rule
			// is order-free: at most one delivery of a message may lack
			// the redelivered flag (its first one, whenever that was).
			// One consumer process records its own deliveries in order:
			// there an unflagged delivery after another is bad outright.
			key := [2]string{op.ID, op.Process}
			if !op.Redelivered {
				fresh[op.ID]++
				if fresh[op.ID] > 1 || seenBy[key] {
					bad[op.ID] = true
				}
			}
			seenBy[key] = true
			switch {
			case n == 0 && op.Redelivered:
				r.FlaggedFirst++
			case n > 0 && op.Redelivered:
				r.Redelivered++
				if acked[op.ID] {
					r.RedeliveredAfterAck++
				}
			}
		case AckSent:
			r.AcksSent++
			acked[op.ID] = true
		case Drained:
			r.Drained = true
		case Kill, Restart, Partition, Heal:
			r.NemesisEvents++
		case Info:
			if op.Process == "nemesis" {
				r.NemesisEvents++
			}
		}
	}

	r.Published = len(published)
	r.Delivered = len(delivered)
	for id, o := range published {
		switch o {
		case confirmed:
			r.Confirmed++
			if delivered[id] == 0 {
				r.Lost = append(r.Lost, id)
			}
		case nacked:
			r.Nacked++
		default:
			r.Indeterminate++
		}
		if o != confirmed && delivered[id] > 0 {
			r.UnconfirmedDelivered++
		}
	}
	r.BadDuplicates = sortedKeys(bad)
	r.Phantoms = sortedKeys(phantom)
	r.Corrupt = sortedKeys(corrupt)
	sort.Strings(r.Lost)
	return r
}

func sortedKeys(m map[string]bool) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
