package exchange

import (
	"testing"

	"github.com/trident-broker/trident/store"
)

// TestDeletedQueueIDNotReused: a crash while a deleted queue's messages
// were being dropped leaves them without a queue record. The next start
// numbers new queues past them, so that no new queue inherits them.
func TestDeletedQueueIDNotReused(t *testing.T) {
	st := store.NewMemory()
	b := newTestBroker(t, st)
	v := mustVHost(t, b, "/")
	declareQ(t, v, "keep", QueueOpts{Durable: true})
	gone := declareQ(t, v, "gone", QueueOpts{Durable: true})
	for range 3 {
		if _, err := v.Publish(&Message{RoutingKey: "gone", Body: []byte("m"), Props: Properties{DeliveryMode: 2}}, PublishOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	// The crash: the record is deleted, the messages are not.
	if err := st.DeleteMeta("queue/" + "/" + "\x00" + "gone"); err != nil {
		t.Fatal(err)
	}
	b2 := newTestBroker(t, st)
	v2 := mustVHost(t, b2, "/")
	if _, ok := v2.queues["gone"]; ok {
		t.Fatal("the deleted queue came back")
	}
	fresh := declareQ(t, v2, "fresh", QueueOpts{Durable: true})
	if fresh.ID() <= gone.ID() {
		t.Fatalf("a new queue got id %d, not past the deleted queue's %d", fresh.ID(), gone.ID())
	}
	b3 := newTestBroker(t, st)
	if q, ok := mustVHost(t, b3, "/").queues["fresh"]; !ok || q.Status().Ready != 0 {
		t.Fatalf("the new queue after a restart: %v", q.Status())
	}
}
