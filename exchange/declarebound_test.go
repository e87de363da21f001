package exchange

import "testing"

func TestDeclareQueueBound(t *testing.T) {
	v, _ := newTestVHost(t)
	info, err := v.DeclareQueueBound("sub-q", QueueOpts{Durable: true}, []Binding{{Exchange: "amq.topic", Key: "a.*"}, {Exchange: "amq.topic", Key: "b.#"}})
	if err != nil || !info.Created || info.Name != "sub-q" {
		t.Fatalf("DeclareQueueBound: %+v %v", info, err)
	}
	for _, key := range []string{"a.x", "b.y.z"} {
		if r := publish(t, v, "amq.topic", key, key); r.Routed != 1 {
			t.Fatalf("%s routed to %d queues, want 1", key, r.Routed)
		}
	}
	// Again: the queue exists, nothing is created, bindings stay single.
	info, err = v.DeclareQueueBound("sub-q", QueueOpts{Durable: true}, []Binding{{Exchange: "amq.topic", Key: "a.*"}})
	if err != nil || info.Created {
		t.Fatalf("redeclare: %+v %v", info, err)
	}
	if n := len(v.Bindings()); n != 2 {
		t.Fatalf("%d bindings, want 2", n)
	}
	_, err = v.DeclareQueueBound("other-q", QueueOpts{}, []Binding{{Exchange: "no-such-x", Key: "k"}})
	wantKind(t, err, KindNotFound)
}
