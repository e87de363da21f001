package exchange

// entry is one message in a queue.
type entry struct {
	msg        *Message
	seq        uint64
	deliveries uint32 // times delivered; >0 means redelivered
	stored     bool   // persisted in the store under (queue id, storeKey)
	page       bool   // a transient message stored only to page it out (dropped at restart)
	own        bool   // the queue holds the reusable msg (reuse.go) and lets go of it when done
	up         uint64 // a proxy's upstream delivery tag (Remote), 0 if local
}

// deque is a ring buffer of entries kept in seq order.
type deque struct {
	buf  []entry
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) grow() {
	c := len(d.buf) * 2
	if c == 0 {
		c = 16
	}
	nb := make([]entry, c)
	for i := 0; i < d.n; i++ {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque) at(i int) *entry { return &d.buf[(d.head+i)%len(d.buf)] }

func (d *deque) pushBack(e entry) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.n)%len(d.buf)] = e
	d.n++
}

func (d *deque) peek() *entry {
	if d.n == 0 {
		return nil
	}
	return &d.buf[d.head]
}

func (d *deque) popFront() entry {
	e := d.buf[d.head]
	d.buf[d.head] = entry{}
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	if d.n == 0 {
		d.release()
	}
	return e
}

// release forgets a big empty buffer: a queue that held many messages in
// memory (and paged them out, or delivered them) keeps no room for them.
func (d *deque) release() {
	d.head = 0
	if len(d.buf) > 64 {
		d.buf = nil
	}
}

// shrink forgets the buffer of an empty deque, whatever its size.
func (d *deque) shrink() {
	if d.n == 0 {
		d.buf, d.head = nil, 0
	}
}

// insert puts e back at its place in seq order (requeue to original position).
func (d *deque) insert(e entry) {
	if d.n == 0 || d.at(d.n-1).seq < e.seq {
		d.pushBack(e)
		return
	}
	if d.n == len(d.buf) {
		d.grow()
	}
	if d.at(0).seq > e.seq {
		d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
		d.buf[d.head] = e
		d.n++
		return
	}
	// Binary search for the first entry with a larger seq.
	lo, hi := 0, d.n
	for lo < hi {
		m := (lo + hi) / 2
		if d.at(m).seq < e.seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	d.n++
	for i := d.n - 1; i > lo; i-- {
		*d.at(i) = *d.at(i - 1)
	}
	*d.at(lo) = e
}

// popBack removes the newest entry.
func (d *deque) popBack() entry {
	i := (d.head + d.n - 1) % len(d.buf)
	e := d.buf[i]
	d.buf[i] = entry{}
	d.n--
	if d.n == 0 {
		d.release()
	}
	return e
}
