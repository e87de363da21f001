package meta

import (
	"errors"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// TestTopologyEntryCodec: a topology command rides in a version 2 entry
// and round-trips; a command of a newer format is ErrUnreadable (the FSM
// halts on it), one that does not decode is ErrBadEntry.
func TestTopologyEntryCodec(t *testing.T) {
	c := Command{Kind: KindTopology, Topology: exchange.TopologyCommand{Op: exchange.TopoBind, VHost: "/", Actor: "alice",
		Name: "q", ToQueue: true, Source: "amq.topic", Key: "a.#", Args: exchange.Table{"k": "v"}}}
	ops, got, err := DecodeEntry(EncodeCommand(c))
	if err != nil || ops != nil || got == nil || !reflect.DeepEqual(*got, c) {
		t.Fatalf("round trip: %v %+v %v", ops, got, err)
	}
	if _, _, err := DecodeEntry([]byte{commandVersion, byte(KindTopology), 1, 250}); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("unknown topology op: %v, want ErrUnreadable", err)
	}
	if _, _, err := DecodeEntry([]byte{commandVersion, byte(KindTopology), 1}); !errors.Is(err, ErrBadEntry) {
		t.Fatalf("truncated topology command: %v, want ErrBadEntry", err)
	}
}

// TestFSMAppliesTopology: the FSM hands a committed topology command to
// the node's core (StoreApplier.Topology) and writes the records it
// returns to the local store; a node whose applier takes no commands
// halts rather than skip one.
func TestFSMAppliesTopology(t *testing.T) {
	local := store.NewMemory()
	var seen []exchange.TopologyCommand
	a := &StoreApplier{Local: local, Replicated: replicated,
		Topology: func(c exchange.TopologyCommand) ([]exchange.MetaOp, error) {
			seen = append(seen, c)
			return []exchange.MetaOp{{Key: "queue/\x00" + c.Name, Val: []byte("rec")}, {Key: "vhost/old"}}, nil
		}}
	if err := local.PutMeta("vhost/old", []byte("1")); err != nil {
		t.Fatal(err)
	}
	f, err := newFSM(a, local, featureflags.NewSet(), discardLog())
	if err != nil {
		t.Fatal(err)
	}
	c := exchange.TopologyCommand{Op: exchange.TopoDeclareQueue, VHost: "/", Name: "q", Durable: true, ID: 7}
	if r := f.Apply(&raft.Log{Index: 1, Data: EncodeCommand(Command{Kind: KindTopology, Topology: c})}); r != nil {
		t.Fatalf("apply: %v", r)
	}
	if len(seen) != 1 || !reflect.DeepEqual(seen[0], c) {
		t.Fatalf("core saw %+v, want %+v", seen, c)
	}
	if v, ok := get(local, "queue/\x00q"); !ok || v != "rec" {
		t.Fatalf("record %q %v", v, ok)
	}
	if _, ok := get(local, "vhost/old"); ok {
		t.Fatal("the command's delete was not written")
	}
	if f.Applied() != 1 {
		t.Fatalf("applied %d", f.Applied())
	}

	f2, err := newTestFSM(t, store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	f2.log = discardLog()
	if err, _ := f2.Apply(&raft.Log{Index: 1, Data: EncodeCommand(Command{Kind: KindTopology, Topology: c})}).(error); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("a node without a topology applier: %v, want ErrUnreadable", err)
	}
	if f2.Applied() != 0 {
		t.Fatal("the command was counted as applied")
	}
}
