package exchange

import (
	"bytes"
	"os"
	"reflect"
	"testing"
	"time"
)

// The store's records and messages as v0.1.0 wrote them
// (testdata/v0.1.0, made by that version's encodeRecord and encodeMessage
// from goldenHeaders): they are on disk and in Raft logs, so they must
// decode, and the same values must encode to the same bytes (binding keys
// and the metadata apply path compare records by their bytes).

func goldenHeaders() Table {
	h := allValues()
	h["decimal-big-scale"] = Decimal{Scale: 200, Value: 7}
	h["time-ns"] = time.Unix(1700000000, 123456789).UTC()
	h["empty-bytes"] = []byte{}
	h["int"] = int(-5)
	h["uint"] = uint(5)
	h["named"] = namedTable{"a": "b"}
	return h
}

// goldenDecoded is goldenHeaders as it decodes: int and uint widened,
// named maps plain tables, times whole seconds.
func goldenDecoded() Table {
	h := goldenHeaders()
	h["time-ns"] = time.Unix(1700000000, 0).UTC()
	h["int"] = int64(-5)
	h["uint"] = uint64(5)
	h["named"] = Table{"a": "b"}
	return h
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/v0.1.0/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenV010Record(t *testing.T) {
	old := readGolden(t, "record.bin")
	got, err := decodeRecord(old)
	if err != nil {
		t.Fatal(err)
	}
	if want := goldenDecoded(); !reflect.DeepEqual(got, want) {
		for k := range want {
			if !reflect.DeepEqual(got[k], want[k]) {
				t.Errorf("%s: got %#v, want %#v", k, got[k], want[k])
			}
		}
		t.Fatalf("decoded %d keys, want %d", len(got), len(want))
	}
	if b := encodeRecord(goldenHeaders()); !bytes.Equal(b, old) {
		t.Fatalf("encoding differs from v0.1.0's\n got % x\nwant % x", b, old)
	}
	q := Table{"id": uint64(7), "durable": true, "args": Table{"x-max-length": int64(10), "x-queue-type": "quorum"}}
	if b := encodeRecord(q); !bytes.Equal(b, readGolden(t, "record-queue.bin")) {
		t.Fatalf("queue record differs from v0.1.0's: % x", b)
	}
}

func TestGoldenV010Message(t *testing.T) {
	old := readGolden(t, "message.bin")
	m, at, err := decodeMessage(old)
	if err != nil {
		t.Fatal(err)
	}
	want := sampleMessages()[0]
	if at != 1700000001 || m.expiresAt != want.expiresAt || m.Exchange != want.Exchange ||
		m.RoutingKey != want.RoutingKey || !bytes.Equal(m.Body, want.Body) {
		t.Fatalf("got %d %+v", at, m)
	}
	wp := want.Props
	wp.Headers = goldenDecoded()
	if !reflect.DeepEqual(m.Props, wp) {
		t.Fatalf("properties\n got %#v\nwant %#v", m.Props, wp)
	}
	want.Props.Headers = goldenHeaders()
	if b := encodeMessage(want, 1700000001, nil); !bytes.Equal(b, old) {
		t.Fatalf("encoding differs from v0.1.0's\n got % x\nwant % x", b, old)
	}
	empty := readGolden(t, "message-empty.bin")
	if m, _, err := decodeMessage(empty); err != nil || m.Props.Headers != nil || len(m.Body) != 0 {
		t.Fatalf("empty message: %+v %v", m, err)
	}
	if b := encodeMessage(&Message{}, 0, nil); !bytes.Equal(b, empty) {
		t.Fatalf("empty message encodes to % x, v0.1.0 wrote % x", b, empty)
	}
}
