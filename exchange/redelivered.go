package exchange

import (
	"encoding/binary"
	"slices"
)

// The redelivered flag across restarts. A message may have reached a
// consumer before the broker stopped; AMQP's redelivered flag says "may have
// been delivered before", and consumers rely on it to spot duplicates. The
// store does not record deliveries (that would be a write per delivery), so:
//
//   - On a clean shutdown, Close records for each stored queue the seqs of
//     its messages that were delivered at least once (by then every
//     connection has closed and its unacked messages are back in the
//     queue), and a clean-shutdown marker.
//   - On start, with the marker, exactly those messages come back flagged
//     redelivered; without it (kill -9, power loss) every recovered message
//     does, which is the safe answer. The marker is removed at start, so a
//     later crash is never mistaken for a clean stop.
const (
	cleanShutdownKey = "shutdown/clean"
	deliveredPrefix  = "delivered/"
	// deliveredAllKey holds every queue's record in one (one synced write
	// at shutdown, not one a queue): uvarint qid, uvarint upto, uvarint
	// len, record, repeated. Per-queue keys are still read (older stops).
	deliveredAllKey = deliveredPrefix + "all"
)

// saveDelivered records the delivered messages of every stored queue and
// then the clean-shutdown marker.
func (b *Broker) saveDelivered() error {
	b.mu.RLock()
	vhosts := make([]*VHost, 0, len(b.vhosts))
	for _, v := range b.vhosts {
		vhosts = append(vhosts, v)
	}
	b.mu.RUnlock()
	var all []byte
	for _, v := range vhosts {
		for _, q := range v.Queues() {
			if !q.persisted() {
				continue
			}
			rec, upto := q.deliveredRecord()
			if rec == nil && upto == 0 {
				continue
			}
			all = binary.AppendUvarint(all, q.id)
			all = binary.AppendUvarint(all, upto)
			all = binary.AppendUvarint(all, uint64(len(rec)))
			all = append(all, rec...)
		}
	}
	if all != nil {
		if err := b.store.PutMeta(deliveredAllKey, all); err != nil {
			return err
		}
	}
	return b.store.PutMeta(cleanShutdownKey, []byte{1})
}

// deliveredRecord encodes the seqs (ascending, delta varints) of the
// queue's stored messages delivered at least once; nil if there are none.
// upto, if not 0, says that every paged-out message with a seq up to it
// may have been delivered (they were recovered after a crash and have not
// been read since).
func (q *Queue) deliveredRecord() (rec []byte, upto uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var seqs []uint64
	r := &q.ready
	for i := range r.levels {
		d := &r.levels[i].head
		for j := 0; j < d.n; j++ {
			if e := d.at(j); e.stored && e.deliveries > 0 {
				seqs = append(seqs, e.seq)
			}
		}
		if r.levels[i].mid > 0 && q.rare != nil {
			upto = q.rare.recAll
		}
	}
	if q.rare != nil {
		for seq := range q.rare.recSeen {
			seqs = append(seqs, seq)
		}
	}
	q.unacked.each(func(seq uint64, u *unackedEntry) {
		if u.e.stored {
			seqs = append(seqs, seq)
		}
	})
	if len(seqs) == 0 {
		return nil, upto
	}
	sortUint64s(seqs)
	var out []byte
	prev := uint64(0)
	for _, s := range seqs {
		out = binary.AppendUvarint(out, s-prev)
		prev = s
	}
	return out, upto
}

func decodeDelivered(b []byte) map[uint64]bool {
	out := map[uint64]bool{}
	prev := uint64(0)
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 {
			break
		}
		prev += d
		out[prev] = true
		b = b[n:]
	}
	return out
}

func sortUint64s(s []uint64) { slices.Sort(s) }

// decodeDeliveredAll adds the records of deliveredAllKey to delivered and
// upto; a malformed tail is ignored (the messages it would have flagged
// are then not flagged: the record is only written at a clean stop).
func decodeDeliveredAll(b []byte, delivered map[uint64]map[uint64]bool, upto map[uint64]uint64) {
	for len(b) > 0 {
		qid, n1 := binary.Uvarint(b)
		if n1 <= 0 {
			return
		}
		u, n2 := binary.Uvarint(b[n1:])
		if n2 <= 0 {
			return
		}
		l, n3 := binary.Uvarint(b[n1+n2:])
		if n3 <= 0 || l > uint64(len(b)-n1-n2-n3) {
			return
		}
		rec := b[n1+n2+n3 : n1+n2+n3+int(l)]
		b = b[n1+n2+n3+int(l):]
		if u > 0 {
			upto[qid] = u
		}
		if len(rec) > 0 {
			delivered[qid] = decodeDelivered(rec)
		}
	}
}
