package exchange

// Batch lets a front end that publishes many messages in a row (its reader
// working through what one read brought in) have the consumers' writers
// woken once at the end of the run instead of once per delivery: a sink
// that gets a Delivery with a Batch may, rather than wake its writer,
// register itself with Defer, and the publisher calls Flush before it
// next waits for input. A Batch belongs to one goroutine, the publisher's;
// Deliver calls that carry it run on that goroutine, inside its Publish.
type Batch struct {
	fs []Flusher
}

// Flusher is what a sink registers: Flush wakes its writer.
type Flusher interface {
	Flush()
}

// maxDeferred bounds what one batch holds back: past it, sinks wake their
// writers themselves.
const maxDeferred = 256

// Defer registers f to be flushed with the batch. It returns false if the
// batch is full: the caller then wakes its writer now.
func (b *Batch) Defer(f Flusher) bool {
	if len(b.fs) >= maxDeferred {
		return false
	}
	b.fs = append(b.fs, f)
	return true
}

// Flush wakes every registered writer, in registration order.
func (b *Batch) Flush() {
	for i, f := range b.fs {
		f.Flush()
		b.fs[i] = nil
	}
	b.fs = b.fs[:0]
}

// Pending reports whether some writer waits for Flush.
func (b *Batch) Pending() bool { return len(b.fs) > 0 }
