package frontend

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// ReadMeter is the reader a front end's frame decoder reads the socket
// through. Before each read, which may wait, it flushes the connection's
// publisher batch (the deliveries the frames read so far made go out, their
// consumers' writers woken once); after it, it records when bytes arrived
// (for heartbeats) and how many (for management).
type ReadMeter struct {
	R        io.Reader
	Batch    *exchange.Batch
	LastRead *atomic.Int64  // UnixNano of the last read that returned bytes
	Bytes    *atomic.Uint64 // bytes read
}

func (m ReadMeter) Read(p []byte) (int, error) {
	if m.Batch.Active() {
		m.Batch.Flush()
		m.Batch.Tick()
	}
	n, err := m.R.Read(p)
	if n > 0 {
		m.LastRead.Store(time.Now().UnixNano())
		m.Bytes.Add(uint64(n))
	}
	return n, err
}
