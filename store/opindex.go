package store

// opIndex maps a message (qid, seq) to the position of its append in a
// batch, for a delete to find it (cancelLocked). Every persistent message
// is put here once and most are looked up and removed within a few
// milliseconds, so it is an open-addressing table with linear probing and
// backward-shift deletion (no tombstones) and a multiplicative hash: a
// batch's appends are mostly consecutive seqs of a few queues, which it
// spreads without hashing 16 bytes of key per call as a Go map does.
type opIndex struct {
	slots []opSlot // len is a power of two, or 0
	n     int
	shift uint8 // 64 - log2(len(slots))
}

type opSlot struct {
	qid, seq uint64
	at       int32 // op index + 1; 0 marks a free slot
}

const opIndexMin = 64 // slots of a table's first allocation

func (x *opIndex) home(qid, seq uint64) int {
	h := (seq ^ qid*0x9e3779b97f4a7c15) * 0xbf58476d1ce4e5b9
	return int(h >> x.shift)
}

// put records that the append of (qid, seq) is op at; a later put of the
// same message replaces it.
func (x *opIndex) put(qid, seq uint64, at int) {
	if 2*(x.n+1) > len(x.slots) {
		x.grow()
	}
	mask := len(x.slots) - 1
	for i := x.home(qid, seq); ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.at == 0 {
			*s = opSlot{qid: qid, seq: seq, at: int32(at) + 1}
			x.n++
			return
		}
		if s.qid == qid && s.seq == seq {
			s.at = int32(at) + 1
			return
		}
	}
}

// take returns the op index of (qid, seq)'s append and removes it.
func (x *opIndex) take(qid, seq uint64) (int, bool) {
	if x.n == 0 {
		return 0, false
	}
	mask := len(x.slots) - 1
	i := x.home(qid, seq)
	for {
		s := &x.slots[i]
		if s.at == 0 {
			return 0, false
		}
		if s.qid == qid && s.seq == seq {
			break
		}
		i = (i + 1) & mask
	}
	at := int(x.slots[i].at) - 1
	x.n--
	// Backward shift: move each later entry of the run whose home is not
	// between the hole and it into the hole.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := x.slots[j]
		if s.at == 0 {
			break
		}
		h := x.home(s.qid, s.seq)
		if (j-h)&mask >= (j-i)&mask {
			x.slots[i] = s
			i = j
		}
	}
	x.slots[i] = opSlot{}
	return at, true
}

func (x *opIndex) grow() {
	old := x.slots
	size := max(2*len(old), opIndexMin)
	x.slots = make([]opSlot, size)
	x.shift = uint8(64 - log2(size))
	x.n = 0
	for _, s := range old {
		if s.at != 0 {
			x.put(s.qid, s.seq, int(s.at)-1)
		}
	}
}

// reset empties the table, keeping its slots unless a burst made them
// many (32,768 slots, 768 KiB: a batch of 16,384 appends; a batch at
// 650k/s with a 3 ms linger has ~2,500).
func (x *opIndex) reset() {
	if len(x.slots) > 1<<15 {
		*x = opIndex{}
		return
	}
	if x.n > 0 {
		clear(x.slots)
		x.n = 0
	}
}

func log2(n int) int {
	k := 0
	for n > 1 {
		n >>= 1
		k++
	}
	return k
}
