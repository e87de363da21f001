package jepsen

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Kind is the type of an operation in a History.
type Kind string

// Client operations.
const (
	// PublishInvoke: a publisher is about to send message ID to node Node.
	PublishInvoke Kind = "publish-invoke"
	// PublishOK: the broker confirmed (basic.ack) message ID.
	PublishOK Kind = "publish-ok"
	// PublishFail: message ID was not confirmed. Indeterminate is false for a
	// basic.nack and true when the outcome is unknown (the connection was
	// lost, or the run ended, before the confirm arrived).
	PublishFail Kind = "publish-fail"
	// Deliver: consumer Consumer received message ID from node Node, with
	// the redelivered flag Redelivered.
	Deliver Kind = "deliver"
	// AckSent: the consumer wrote basic.ack for message ID. Acks are not
	// confirmed in AMQP 0-9-1, so this is all a client can know.
	AckSent Kind = "ack-sent"
	// Drained: the workload consumed until the queue was empty and stayed
	// empty. A history without it cannot tell a lost message from one
	// still in the queue.
	Drained Kind = "drained"
)

// Nemesis events, recorded by Config.Nemesis and Config.Heal through the
// record function they are given.
const (
	Kill      Kind = "kill"      // a node was killed (e.g. SIGKILL)
	Restart   Kind = "restart"   // a node was started again
	Partition Kind = "partition" // the network was split (Detail says how)
	Heal      Kind = "heal"      // partitions were healed
	Info      Kind = "info"      // anything else worth a line in the history
)

// Op is one entry of a History.
type Op struct {
	// Seq is the position in the history: the order in which the runner
	// recorded the operations, which is consistent with real time.
	Seq int64 `json:"seq"`
	// Time is the wall clock when the operation was recorded.
	Time time.Time `json:"time"`
	// Mono is the monotonic time since the start of the run.
	Mono time.Duration `json:"mono"`
	Kind Kind          `json:"kind"`
	// Process is the client ("publisher-0", "consumer-1") or "nemesis".
	Process string `json:"process,omitempty"`
	// Node is the index in Config.Addrs, or -1 when no node applies.
	Node int `json:"node"`
	// ID is the message id (publish, deliver, ack-sent).
	ID          string `json:"id,omitempty"`
	Redelivered bool   `json:"redelivered,omitempty"`
	// Corrupt marks a delivery whose body differs from its message-id.
	Corrupt       bool   `json:"corrupt,omitempty"`
	Consumer      string `json:"consumer,omitempty"`
	Indeterminate bool   `json:"indeterminate,omitempty"`
	Detail        string `json:"detail,omitempty"`
	Err           string `json:"err,omitempty"`
}

// Event is what a nemesis records: one of Kill, Restart, Partition, Heal,
// Info, on node Node (-1 for none or all).
type Event struct {
	Kind   Kind
	Node   int
	Detail string
	Err    error
}

// History is a list of operations in Seq order.
type History []Op

// WriteJSONL writes h as JSON lines, one Op per line.
func (h History) WriteJSONL(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range h {
		if err := enc.Encode(&h[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ReadJSONL reads a history written by WriteJSONL.
func ReadJSONL(r io.Reader) (History, error) {
	var h History
	dec := json.NewDecoder(r)
	for {
		var op Op
		if err := dec.Decode(&op); err == io.EOF {
			return h, nil
		} else if err != nil {
			return h, err
		}
		h = append(h, op)
	}
}

// Recorder appends operations to a history from many goroutines, stamping
// each with Seq, Time and Mono. Its zero value is not usable; use
// NewRecorder.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   History
}

// NewRecorder returns a Recorder whose monotonic clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Record appends op, overwriting its Seq, Time and Mono.
func (r *Recorder) Record(op Op) {
	r.mu.Lock()
	now := time.Now()
	op.Seq = int64(len(r.ops))
	op.Time = now
	op.Mono = now.Sub(r.start)
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Event records a nemesis event.
func (r *Recorder) Event(e Event) {
	op := Op{Kind: e.Kind, Process: "nemesis", Node: e.Node, Detail: e.Detail}
	if e.Err != nil {
		op.Err = e.Err.Error()
	}
	r.Record(op)
}

// History returns a copy of the operations recorded so far.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(History(nil), r.ops...)
}
