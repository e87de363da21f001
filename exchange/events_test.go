package exchange

import "testing"

// The event bus is on exactly while something is bound to the event
// exchange, which exists only in the event vhost and is internal.
func TestEventExchangeListening(t *testing.T) {
	v, _ := newTestVHost(t)
	b := v.b
	x, ok := v.Exchange(EventExchange)
	if !ok || !x.Internal() || x.Kind() != KindTopic {
		t.Fatalf("%s in /: %v %+v", EventExchange, ok, x)
	}
	other := mustVHost(t, b, "other")
	if _, ok := other.Exchange(EventExchange); ok {
		t.Fatalf("%s declared outside the event vhost", EventExchange)
	}
	if b.Events().On() {
		t.Fatal("events on with no binding")
	}
	if _, err := v.DeclareQueue("ev", QueueOpts{}); err != nil {
		t.Fatal(err)
	}
	if err := v.BindQueue("ev", EventExchange, "queue.*", nil, nil); err != nil {
		t.Fatal(err)
	}
	if !b.Events().On() {
		t.Fatal("events off with a binding")
	}
	if err := v.UnbindQueue("ev", EventExchange, "queue.*", nil, nil); err != nil {
		t.Fatal(err)
	}
	if b.Events().On() {
		t.Fatal("events on after the last binding went")
	}
	if err := v.BindQueue("ev", EventExchange, "#", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := v.DeleteQueue("ev", false, false, nil); err != nil {
		t.Fatal(err)
	}
	if b.Events().On() {
		t.Fatal("events on after the bound queue was deleted")
	}
}
