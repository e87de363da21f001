package exchange

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// recordingAuthz records every access asked and refuses those in deny
// ("write exchange private.x").
type recordingAuthz struct {
	asked []string
	deny  map[string]bool
}

var errDenied = errors.New("denied")

func (a *recordingAuthz) ask(perm, kind, name string) error {
	s := perm + " " + kind + " " + name
	a.asked = append(a.asked, s)
	if a.deny[s] {
		return fmt.Errorf("%w: %s", errDenied, s)
	}
	return nil
}

func (a *recordingAuthz) CheckConfigure(_, kind, name string) error {
	return a.ask("configure", kind, name)
}
func (a *recordingAuthz) CheckWrite(_, kind, name string) error { return a.ask("write", kind, name) }
func (a *recordingAuthz) CheckRead(_, kind, name string) error  { return a.ask("read", kind, name) }

// TestAuthorizeNeeds: every topology command asks exactly RabbitMQ's
// permissions, arguments included (a dead-letter exchange, an alternate
// exchange).
func TestAuthorizeNeeds(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  Command
		want []string
	}{
		{"queue.declare", QueueDeclare{Name: "q"}, []string{"configure queue q"}},
		{"queue.declare passive", QueueDeclare{Name: "q", Opts: QueueOpts{Passive: true}}, nil},
		{"queue.declare dlx", QueueDeclare{Name: "u1.dlq", Opts: QueueOpts{Args: Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "private.q"}}},
			[]string{"configure queue u1.dlq", "read queue u1.dlq", "write exchange "}},
		{"queue.declare dlx named", QueueDeclare{Name: "q", Opts: QueueOpts{Args: Table{"x-dead-letter-exchange": "dlx"}}},
			[]string{"configure queue q", "read queue q", "write exchange dlx"}},
		{"exchange.declare", ExchangeDeclare{Name: "x", Type: KindFanout}, []string{"configure exchange x"}},
		{"exchange.declare passive", ExchangeDeclare{Name: "x", Opts: ExchangeOpts{Passive: true}}, nil},
		{"exchange.declare ae", ExchangeDeclare{Name: "u1.ae", Type: KindFanout, Opts: ExchangeOpts{Args: Table{"alternate-exchange": "private.x"}}},
			[]string{"configure exchange u1.ae", "read exchange u1.ae", "write exchange private.x"}},
		{"queue.bind", QueueBind{Queue: "q", Exchange: "x"}, []string{"write queue q", "read exchange x"}},
		{"queue.unbind", QueueUnbind{Queue: "q", Exchange: "x"}, []string{"write queue q", "read exchange x"}},
		{"exchange.bind", ExchangeBind{Destination: "d", Source: "s"}, []string{"write exchange d", "read exchange s"}},
		{"exchange.unbind", ExchangeUnbind{Destination: "d", Source: "s"}, []string{"write exchange d", "read exchange s"}},
		{"queue.delete", QueueDelete{Name: "q"}, []string{"configure queue q"}},
		{"exchange.delete", ExchangeDelete{Name: "x"}, []string{"configure exchange x"}},
		{"queue.purge", QueuePurge{Name: "q"}, []string{"read queue q"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &recordingAuthz{}
			if err := Authorize(a, "/", tc.cmd); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a.asked, tc.want) {
				t.Fatalf("asked %q, want %q", a.asked, tc.want)
			}
		})
	}
	if err := Authorize(nil, "/", QueueDeclare{Name: "q"}); KindOf(err) != KindAccessRefused {
		t.Fatalf("no identity: %v", err)
	}
}

// TestDoRefusedChangesNothing: a refused command leaves no trace: a queue
// whose dead-letter exchange the user may not write is not declared, nor
// an exchange whose alternate exchange it may not write.
func TestDoRefusedChangesNothing(t *testing.T) {
	v, _ := newTestVHost(t)
	a := &recordingAuthz{deny: map[string]bool{"write exchange ": true, "write exchange private.x": true}}
	_, err := v.Do(a, QueueDeclare{Name: "u1.dlq", Opts: QueueOpts{Args: Table{"x-dead-letter-exchange": "", "x-message-ttl": int64(0)}}})
	if !errors.Is(err, errDenied) {
		t.Fatalf("declare with a refused DLX: %v", err)
	}
	if _, err := v.Queue("u1.dlq", nil); err == nil {
		t.Fatal("queue declared although its dead-letter exchange was refused")
	}
	_, err = v.Do(a, ExchangeDeclare{Name: "u1.ae", Type: KindFanout, Opts: ExchangeOpts{Args: Table{"alternate-exchange": "private.x"}}})
	if !errors.Is(err, errDenied) {
		t.Fatalf("declare with a refused AE: %v", err)
	}
	if _, ok := v.Exchange("u1.ae"); ok {
		t.Fatal("exchange declared although its alternate exchange was refused")
	}
}

// TestDoServerNamedChecksGeneratedName: a server-named queue's configure
// permission is asked on the name it gets, as RabbitMQ does.
func TestDoServerNamedChecksGeneratedName(t *testing.T) {
	v, _ := newTestVHost(t)
	a := &recordingAuthz{}
	r, err := v.Do(a, QueueDeclare{Opts: QueueOpts{Exclusive: true, Owner: a}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Queue.Name, "amq.gen-") || len(a.asked) != 1 || a.asked[0] != "configure queue "+r.Queue.Name {
		t.Fatalf("declared %q, asked %q", r.Queue.Name, a.asked)
	}
	// A client may still not choose an amq. name itself.
	if _, err := v.Do(a, QueueDeclare{Name: "amq.mine"}); KindOf(err) != KindAccessRefused {
		t.Fatalf("amq. name: %v", err)
	}
}

// TestNamesChecked: names longer than 255 bytes, not UTF-8 or with a NUL
// are refused for queues, exchanges and vhosts, whatever path declares them.
func TestNamesChecked(t *testing.T) {
	v, _ := newTestVHost(t)
	for _, bad := range []string{strings.Repeat("a", 256), "bad\xffname", "nul\x00name"} {
		if _, err := v.DeclareQueue(bad, QueueOpts{}); KindOf(err) != KindPreconditionFailed {
			t.Errorf("queue %q: %v", bad, err)
		}
		if err := v.DeclareExchange(bad, KindDirect, ExchangeOpts{}); KindOf(err) != KindPreconditionFailed {
			t.Errorf("exchange %q: %v", bad, err)
		}
		if err := v.b.EnsureVHost(bad); KindOf(err) != KindPreconditionFailed {
			t.Errorf("vhost %q: %v", bad, err)
		}
	}
	ok := strings.Repeat("é", 127) // 254 bytes of UTF-8
	if _, err := v.DeclareQueue(ok, QueueOpts{}); err != nil {
		t.Fatalf("254-byte UTF-8 name: %v", err)
	}
}
