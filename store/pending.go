package store

import (
	"cmp"
	"slices"
)

// pendingOp is a queued append (data set) or delete of one message, as
// the read path sees it before the writer has written it.
type pendingOp struct {
	seq  uint64
	data []byte // nil: deleted
}

// seqRange is the range [from, to) of a queued range delete.
type seqRange struct{ from, to uint64 }

func (r seqRange) has(seq uint64) bool { return seq >= r.from && seq < r.to }

// pendingFor collects the appends and deletes of qid's messages from seq
// from on that are queued or being written (their last state per seq,
// sorted by seq), whether a drop of qid is among them (then what Badger
// holds of qid is gone) and the ranges deleted by queued range deletes
// (what Badger holds there is gone; ops queued after them are in ops).
// Data is copied.
func (b *Badger) pendingFor(qid, from uint64) (ops []pendingOp, dropped bool, gone []seqRange) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Range deletes under way (rangedel.go) were issued before anything
	// queued now.
	for _, r := range b.rangeView {
		if r.qid == qid && r.to > from {
			gone = append(gone, seqRange{r.from, r.to})
		}
	}
	var last map[uint64]int
	for _, c := range [3]*batch{b.writing, b.aged, b.pend} {
		if c == nil {
			continue
		}
		for i := range c.ops {
			o := &c.ops[i]
			if o.qid != qid {
				continue
			}
			switch o.kind {
			case opDrop:
				ops, dropped, gone = ops[:0], true, nil
				clear(last)
				continue
			case opRange:
				if o.to <= from {
					continue
				}
				r := seqRange{o.seq, o.to}
				gone = append(gone, r)
				kept := ops[:0]
				for _, p := range ops {
					if !r.has(p.seq) {
						kept = append(kept, p)
					}
				}
				clear(kept[len(kept):len(ops)])
				ops = kept
				clear(last)
				if last == nil {
					last = map[uint64]int{}
				}
				for j, p := range ops {
					last[p.seq] = j
				}
				continue
			case opAppend, opDelete:
			default:
				continue
			}
			if o.seq < from {
				continue
			}
			var data []byte
			if o.kind == opAppend && !o.skip { // a cancelled one was deleted
				data = append(make([]byte, 0, o.n), c.arena[o.off:o.off+o.n]...)
			}
			if last == nil {
				last = map[uint64]int{}
			}
			if j, ok := last[o.seq]; ok {
				ops[j].data = data
				continue
			}
			last[o.seq] = len(ops)
			ops = append(ops, pendingOp{seq: o.seq, data: data})
		}
	}
	slices.SortFunc(ops, func(a, b pendingOp) int { return cmp.Compare(a.seq, b.seq) })
	return ops, dropped, gone
}
