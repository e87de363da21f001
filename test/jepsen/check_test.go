package jepsen

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// hist builds a history from compact ops, numbering Seq in order.
func hist(ops ...Op) History {
	h := make(History, len(ops))
	for i, op := range ops {
		op.Seq = int64(i)
		h[i] = op
	}
	return h
}

func inv(id string) Op  { return Op{Kind: PublishInvoke, ID: id} }
func ok(id string) Op   { return Op{Kind: PublishOK, ID: id} }
func nack(id string) Op { return Op{Kind: PublishFail, ID: id} }
func lostConn(id string) Op {
	return Op{Kind: PublishFail, ID: id, Indeterminate: true}
}
func dlv(id string) Op   { return Op{Kind: Deliver, ID: id} }
func redlv(id string) Op { return Op{Kind: Deliver, ID: id, Redelivered: true} }
func ack(id string) Op   { return Op{Kind: AckSent, ID: id} }

var drained = Op{Kind: Drained}

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		h     History
		valid bool
		check func(t *testing.T, r Result)
	}{
		{
			name:  "clean",
			h:     hist(inv("a"), inv("b"), ok("a"), ok("b"), dlv("a"), ack("a"), dlv("b"), ack("b"), drained),
			valid: true,
			check: func(t *testing.T, r Result) {
				want := Result{Published: 2, Confirmed: 2, Delivered: 2, Deliveries: 2, AcksSent: 2, Drained: true}
				if !reflect.DeepEqual(r, want) {
					t.Errorf("got %+v, want %+v", r, want)
				}
			},
		},
		{
			name:  "confirmed never delivered is lost",
			h:     hist(inv("a"), inv("b"), ok("a"), ok("b"), dlv("a"), drained),
			valid: false,
			check: func(t *testing.T, r Result) {
				if !reflect.DeepEqual(r.Lost, []string{"b"}) {
					t.Errorf("Lost = %v, want [b]", r.Lost)
				}
			},
		},
		{
			name:  "nacked never delivered is not lost",
			h:     hist(inv("a"), nack("a"), drained),
			valid: true,
			check: func(t *testing.T, r Result) {
				if r.Nacked != 1 || len(r.Lost) != 0 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:  "indeterminate never delivered is not lost",
			h:     hist(inv("a"), lostConn("a"), inv("b"), drained),
			valid: true,
			check: func(t *testing.T, r Result) {
				if r.Indeterminate != 2 || len(r.Lost) != 0 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:  "late failure does not undo a confirm",
			h:     hist(inv("a"), ok("a"), lostConn("a"), drained),
			valid: false,
			check: func(t *testing.T, r Result) {
				if r.Confirmed != 1 || len(r.Lost) != 1 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:  "duplicate without the redelivered flag is bad",
			h:     hist(inv("a"), ok("a"), dlv("a"), ack("a"), dlv("a"), drained),
			valid: false,
			check: func(t *testing.T, r Result) {
				if !reflect.DeepEqual(r.BadDuplicates, []string{"a"}) || r.Redelivered != 0 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:  "duplicate with the redelivered flag is allowed",
			h:     hist(inv("a"), ok("a"), dlv("a"), redlv("a"), ack("a"), redlv("a"), drained),
			valid: true,
			check: func(t *testing.T, r Result) {
				if r.Redelivered != 2 || r.RedeliveredAfterAck != 1 || r.Deliveries != 3 || r.Delivered != 1 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			// Consumers on two connections record in their own time: the
			// broker's first (unflagged) delivery may be recorded second.
			name: "one unflagged delivery recorded after a flagged one is allowed",
			h: hist(inv("a"), ok("a"), Op{Kind: Deliver, ID: "a", Process: "consumer-0", Redelivered: true},
				Op{Kind: Deliver, ID: "a", Process: "consumer-1"}, drained),
			valid: true,
			check: func(t *testing.T, r Result) {
				if len(r.BadDuplicates) != 0 || r.FlaggedFirst != 1 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name: "unflagged after flagged on the same consumer is bad",
			h: History{{Seq: 1, Kind: PublishInvoke, ID: "a"}, {Seq: 2, Kind: PublishOK, ID: "a"},
				{Seq: 3, Kind: Deliver, ID: "a", Process: "consumer-0", Redelivered: true},
				{Seq: 4, Kind: Deliver, ID: "a", Process: "consumer-0"}, {Seq: 5, Kind: Drained}},
			valid: false,
			check: func(t *testing.T, r Result) {
				if !reflect.DeepEqual(r.BadDuplicates, []string{"a"}) {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:  "two unflagged deliveries are bad in any order",
			h:     hist(inv("a"), ok("a"), redlv("a"), dlv("a"), dlv("a"), drained),
			valid: false,
			check: func(t *testing.T, r Result) {
				if !reflect.DeepEqual(r.BadDuplicates, []string{"a"}) {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:  "flagged first delivery is allowed",
			h:     hist(inv("a"), ok("a"), redlv("a"), drained),
			valid: true,
			check: func(t *testing.T, r Result) {
				if r.FlaggedFirst != 1 || r.Redelivered != 0 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:  "order is by Seq, not slice position",
			h:     History{{Seq: 3, Kind: Deliver, ID: "a", Redelivered: true}, {Seq: 2, Kind: Deliver, ID: "a"}, {Seq: 1, Kind: PublishInvoke, ID: "a"}, {Seq: 4, Kind: Drained}},
			valid: true,
			check: func(t *testing.T, r Result) {
				if r.Redelivered != 1 || len(r.BadDuplicates) != 0 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:  "delivered never published is a phantom",
			h:     hist(inv("a"), ok("a"), dlv("a"), dlv("zz"), drained),
			valid: false,
			check: func(t *testing.T, r Result) {
				if !reflect.DeepEqual(r.Phantoms, []string{"zz"}) {
					t.Errorf("Phantoms = %v", r.Phantoms)
				}
			},
		},
		{
			name:  "unconfirmed but delivered is allowed and counted",
			h:     hist(inv("a"), lostConn("a"), inv("b"), nack("b"), inv("c"), dlv("a"), dlv("b"), dlv("c"), drained),
			valid: true,
			check: func(t *testing.T, r Result) {
				if r.UnconfirmedDelivered != 3 || r.Phantoms != nil {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:  "corrupt body",
			h:     hist(inv("a"), ok("a"), Op{Kind: Deliver, ID: "a", Corrupt: true}, drained),
			valid: false,
			check: func(t *testing.T, r Result) {
				if !reflect.DeepEqual(r.Corrupt, []string{"a"}) {
					t.Errorf("Corrupt = %v", r.Corrupt)
				}
			},
		},
		{
			name:  "no drain is invalid",
			h:     hist(inv("a"), ok("a"), dlv("a")),
			valid: false,
			check: func(t *testing.T, r Result) {
				if r.Drained || !strings.Contains(r.Err().Error(), "drain") {
					t.Errorf("got %+v, %v", r, r.Err())
				}
			},
		},
		{
			name: "nemesis events are counted",
			h: hist(Op{Kind: Kill}, Op{Kind: Restart}, Op{Kind: Partition}, Op{Kind: Heal},
				Op{Kind: Info, Process: "nemesis"}, Op{Kind: Info, Process: "publisher-0"}, drained),
			valid: true,
			check: func(t *testing.T, r Result) {
				if r.NemesisEvents != 5 {
					t.Errorf("NemesisEvents = %d", r.NemesisEvents)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.h)
			if r.Valid() != tc.valid {
				t.Errorf("Valid() = %v, want %v (err %v)", r.Valid(), tc.valid, r.Err())
			}
			tc.check(t, r)
		})
	}
}

func TestHistoryJSONL(t *testing.T) {
	rec := NewRecorder()
	rec.Record(inv("p0-0"))
	rec.Record(Op{Kind: Deliver, ID: "p0-0", Node: 1, Redelivered: true, Consumer: "consumer-0.3"})
	rec.Event(Event{Kind: Kill, Node: 0, Detail: "SIGKILL"})
	h := rec.History()
	for i, op := range h {
		if op.Seq != int64(i) || op.Time.IsZero() || (i > 0 && op.Mono < h[i-1].Mono) {
			t.Fatalf("op %d not stamped in order: %+v", i, op)
		}
	}
	var buf bytes.Buffer
	if err := h.WriteJSONL(&buf); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(h) {
		t.Fatalf("%d lines for %d ops", n, len(h))
	}
	got, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(h) {
		t.Fatalf("read %d ops, wrote %d", len(got), len(h))
	}
	for i := range h {
		if !got[i].Time.Equal(h[i].Time) {
			t.Errorf("op %d: time %v, want %v", i, got[i].Time, h[i].Time)
		}
		got[i].Time = h[i].Time
	}
	if !reflect.DeepEqual(got, h) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, h)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Addrs: []string{"amqp://x"}, Queue: "q"}.withDefaults()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"no addrs":      func(c *Config) { c.Addrs = nil },
		"no queue":      func(c *Config) { c.Queue = "" },
		"negative rate": func(c *Config) { c.Rate = -1 },
	} {
		c := good
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
