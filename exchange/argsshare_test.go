package exchange

import "testing"

// TestQueueArgsSharedUntilPolicy: queues declared without arguments
// share one set of effective arguments (none of their own: 184 bytes of
// every MQTT device's queue) until a policy changes them; a policy on one
// queue changes neither the others' arguments nor the shared set, and
// once it is gone the queue's arguments are the declared ones again.
func TestQueueArgsSharedUntilPolicy(t *testing.T) {
	v, _ := newTestVHost(t)
	a := declareQ(t, v, "dev-a", QueueOpts{})
	b := declareQ(t, v, "dev-b", QueueOpts{})
	args := func(q *Queue) *queueArgs {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.a
	}
	if args(a) != noArgs || args(b) != noArgs {
		t.Fatal("a queue declared without arguments has effective arguments of its own")
	}
	setPolicy(t, v, Policy{Name: "p", Pattern: "^dev-a$", ApplyTo: ApplyToQueues, Definition: Table{"max-length": int64(7)}})
	if got := args(a); got == noArgs || got.maxLen != 7 {
		t.Fatalf("the policy is not in effect: %+v", *got)
	}
	if args(b) != noArgs || noArgs.maxLen != -1 {
		t.Fatalf("a policy on one queue changed another's arguments or the shared ones: %+v", *noArgs)
	}
	if err := v.DeletePolicy("p"); err != nil {
		t.Fatal(err)
	}
	if got := args(a); got.maxLen != -1 || *got != *noArgs {
		t.Fatalf("without the policy: %+v", *got)
	}
}
