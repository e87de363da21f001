package exchange

import (
	"errors"
	"slices"
	"sync"
	"testing"
)

// notAppendedErr is a message log's error for an op it never appended
// (cluster/quorum.NotAppendedError).
type notAppendedErr struct{}

func (notAppendedErr) Error() string     { return "not appended (test)" }
func (notAppendedErr) NotAppended() bool { return true }

// naConfirms is a NotAppendedConfirmer.
type naConfirms struct {
	*confirms
	mu sync.Mutex
	na []uint64
}

func (c *naConfirms) NotAppended(tag uint64) {
	c.mu.Lock()
	c.na = append(c.na, tag)
	c.mu.Unlock()
	c.ch <- struct{}{}
}

func (c *naConfirms) notAppended() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.na)
}

// TestConfirmNotAppended: a publish whose one queue's log never appended
// it is reported as not appended to a NotAppendedConfirmer (which may
// send it to the queue's next owner), in the result when the log
// answered before Publish returned; a publish that reached two queues,
// or a Confirmer that cannot take it, gets a plain failure.
func TestConfirmNotAppended(t *testing.T) {
	if !NotAppended(errors.Join(errors.New("x"), notAppendedErr{})) || NotAppended(errors.New("x")) {
		t.Fatal("NotAppended does not look through the error's chain")
	}
	v, st := newTestVHost(t)
	declareQ(t, v, "d1", QueueOpts{Durable: true})
	declareQ(t, v, "d2", QueueOpts{Durable: true})
	if err := v.DeclareExchange("fx", "fanout", ExchangeOpts{Durable: true}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"d1", "d2"} {
		if err := v.BindQueue(q, "fx", "", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	cf := &naConfirms{confirms: newConfirms()}
	// hold: the log answers after Publish returned (release).
	hold := func() {
		st.Mu.Lock()
		st.Hold, st.FailErr = true, notAppendedErr{}
		st.Mu.Unlock()
	}
	hold()

	if r := publishM(t, v, persistent("", "d1", "m"), PublishOpts{Confirmer: cf, Tag: 1}); !r.Pending {
		t.Fatalf("one queue: %+v", r)
	}
	st.Release()
	<-cf.ch
	if got := cf.notAppended(); !slices.Equal(got, []uint64{1}) || len(cf.get(1)) != 0 {
		t.Fatalf("one queue: not appended %v, confirms %v; want tag 1 not appended", got, cf.get(1))
	}

	hold()
	if r := publishM(t, v, persistent("fx", "", "m"), PublishOpts{Confirmer: cf, Tag: 2}); !r.Pending {
		t.Fatalf("two queues: %+v", r)
	}
	st.Release()
	<-cf.ch
	if got := cf.get(2); len(got) != 1 || got[0] || slices.Contains(cf.notAppended(), 2) {
		t.Fatalf("two queues: confirms %v, not appended %v; want one false", got, cf.notAppended())
	}

	plain := newConfirms()
	hold()
	publishM(t, v, persistent("", "d1", "m"), PublishOpts{Confirmer: plain, Tag: 3})
	st.Release()
	<-plain.ch
	if got := plain.get(3); len(got) != 1 || got[0] {
		t.Fatalf("a plain Confirmer: confirms %v, want one false", got)
	}

	st.Mu.Lock()
	st.SyncDone = true
	st.Mu.Unlock()
	if r := publishM(t, v, persistent("", "d1", "m"), PublishOpts{Confirmer: cf, Tag: 4}); r.Pending || r.OK || !r.NotAppended {
		t.Fatalf("answered before Publish returned: %+v, want NotAppended", r)
	}
	if r := publishM(t, v, persistent("fx", "", "m"), PublishOpts{Confirmer: cf, Tag: 5}); r.Pending || r.OK || r.NotAppended {
		t.Fatalf("two queues, answered before Publish returned: %+v, want a plain failure", r)
	}
}
