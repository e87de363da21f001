package exchange

// entry is one message in a queue.
type entry struct {
	msg        *Message
	seq        uint64
	deliveries uint32 // times delivered; >0 means redelivered
	stored     bool   // persisted in the store under (queue id, seq)
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
		d.head = 0
	}
	return e
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

// readyList holds ready messages, one deque per priority level.
type readyList struct {
	levels []deque // index = priority; len 1 without x-max-priority
	n      int
	bytes  int64
}

func newReadyList(maxPriority int) readyList {
	return readyList{levels: make([]deque, maxPriority+1)}
}

func (r *readyList) level(e *entry) *deque {
	p := int(e.msg.Props.Priority)
	if p >= len(r.levels) {
		p = len(r.levels) - 1
	}
	return &r.levels[p]
}

func (r *readyList) push(e entry) {
	r.level(&e).pushBack(e)
	r.n++
	r.bytes += int64(len(e.msg.Body))
}

func (r *readyList) insert(e entry) {
	r.level(&e).insert(e)
	r.n++
	r.bytes += int64(len(e.msg.Body))
}

// front returns the deque holding the next message to deliver.
func (r *readyList) front() *deque {
	for i := len(r.levels) - 1; i >= 0; i-- {
		if r.levels[i].n > 0 {
			return &r.levels[i]
		}
	}
	return nil
}

func (r *readyList) peek() *entry {
	if d := r.front(); d != nil {
		return d.peek()
	}
	return nil
}

func (r *readyList) pop() (entry, bool) {
	d := r.front()
	if d == nil {
		return entry{}, false
	}
	e := d.popFront()
	r.n--
	r.bytes -= int64(len(e.msg.Body))
	return e, true
}

// popOldest removes the head of the lowest priority level (x-max-length drops
// from the head; with priorities, RabbitMQ drops the lowest priority first).
func (r *readyList) popOldest() (entry, bool) {
	for i := range r.levels {
		if r.levels[i].n > 0 {
			e := r.levels[i].popFront()
			r.n--
			r.bytes -= int64(len(e.msg.Body))
			return e, true
		}
	}
	return entry{}, false
}

func (r *readyList) clear() []entry {
	out := make([]entry, 0, r.n)
	for i := range r.levels {
		for r.levels[i].n > 0 {
			out = append(out, r.levels[i].popFront())
		}
	}
	r.n, r.bytes = 0, 0
	return out
}
