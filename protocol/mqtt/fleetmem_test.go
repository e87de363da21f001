package mqtt

import (
	"encoding/binary"
	"testing"
	"time"
	"unsafe"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/exchange"
)

// TestFleetStructSizes: what an idle subscribed device holds stays in
// the size classes issue 42's fleet work brought it to. An object larger
// than 512 bytes with pointers carries an 8-byte header of the runtime's:
// a 640-byte connection took the 704-byte class, a 488-byte queue would
// take the 512-byte one; a field more takes the next class for every
// device.
func TestFleetStructSizes(t *testing.T) {
	const header = 8
	for _, c := range []struct {
		what        string
		size, class uintptr
	}{
		{"conn", unsafe.Sizeof(conn{}) + header, 640},
		{"session", unsafe.Sizeof(session{}), 160},
		{"exchange.Queue", unsafe.Sizeof(exchange.Queue{}), 480}, // no header up to 512 bytes
		{"exchange.Consumer", unsafe.Sizeof(exchange.Consumer{}), 96},
	} {
		if c.size > c.class {
			t.Errorf("%s takes %d bytes, more than its size class of %d (the next one costs every device)", c.what, c.size, c.class)
		}
	}
}

// TestSessionStringsShared: a session's vhost and client id are parts of
// its key, its subscriptions' queue name is its own, and the
// connection's client id is the session's: no copy of each per device,
// and none that keeps the CONNECT packet (whose strings the decoder
// makes as views of it) in memory.
func TestSessionStringsShared(t *testing.T) {
	s, addr := testServer(t)
	benchMQTTDial(t, addr, "shared-strings", 4, "shared/t")
	c := serverConn(t, s, "shared-strings")
	se := c.se
	within := func(part, whole string) bool {
		p, w := uintptr(unsafe.Pointer(unsafe.StringData(part))), uintptr(unsafe.Pointer(unsafe.StringData(whole)))
		return p >= w && p+uintptr(len(part)) <= w+uintptr(len(whole))
	}
	if !within(se.vhost(), se.key) || !within(se.clientID(), se.key) {
		t.Error("the session's vhost or client id is a copy of its own, not part of its key")
	}
	if unsafe.StringData(c.clientID) != unsafe.StringData(se.clientID()) {
		t.Error("the connection keeps a client id of its own (the CONNECT packet's?)")
	}
	subs := se.subList()
	if len(subs) != 1 || unsafe.StringData(subs[0].queue) != unsafe.StringData(se.qname) {
		t.Errorf("the subscription's queue name is not the session's (%d subscriptions)", len(subs))
	}
}

// TestReaderStateGoneWhenParked: a publisher's reader state (its topic
// cache) is made by a publish and gone once it parks; an MQTT 5
// publisher's topic aliases stay across parking, so that a publish by
// alias alone after an idle spell still routes.
func TestReaderStateGoneWhenParked(t *testing.T) {
	s, addr := testServer(t)
	sub := benchMQTTDial(t, addr, "alias-sub", 4, "alias/t")
	pub4 := benchMQTTDial(t, addr, "plain-pub", 4, "")
	pub5 := benchMQTTDial(t, addr, "alias-pub", 5, "")
	c4, c5 := serverConn(t, s, "plain-pub"), serverConn(t, s, "alias-pub")

	if _, err := pub4.Write(benchPacket(nil, 0x30, append(benchString(nil, "alias/t"), 'a'))); err != nil {
		t.Fatal(err)
	}
	// PUBLISH alias/t setting topic alias 1 (property 0x23).
	props := []byte{3, 0x23, 0, 1}
	if _, err := pub5.Write(benchPacket(nil, 0x30, append(append(benchString(nil, "alias/t"), props...), 'b'))); err != nil {
		t.Fatal(err)
	}
	_ = sub.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := map[string]bool{}
	read := func() {
		t.Helper()
		first, b := benchReadPacket(t, sub)
		if first>>4 != packets.Publish {
			t.Fatalf("packet %x", first)
		}
		n := int(binary.BigEndian.Uint16(b))
		got[string(b[2+n:])] = true
	}
	read()
	read()
	if !got["a"] || !got["b"] {
		t.Fatalf("got %v", got)
	}
	for _, c := range []*conn{c4, c5} {
		if !waitParked(c, 10*time.Second) {
			t.Fatal("a publisher did not park")
		}
	}
	if c4.rd != nil {
		t.Error("a parked MQTT 3.1.1 publisher keeps its reader state")
	}
	if c5.rd == nil || c5.rd.aliasIn[1] != "alias/t" || c5.rd.pubTopic != "" {
		t.Fatal("a parked MQTT 5 publisher lost its topic aliases, or kept its topic cache")
	}
	// By alias alone, after parking.
	if _, err := pub5.Write(benchPacket(nil, 0x30, append(append(benchString(nil, ""), props...), 'c'))); err != nil {
		t.Fatal(err)
	}
	read()
	if !got["c"] {
		t.Fatalf("the publish by alias after parking did not arrive: %v", got)
	}
}

// TestParkedHoldsNoReader: a parked plain TCP connection holds no reader
// (it went back to the pool), and one woken reads and answers as before,
// each time.
func TestParkedHoldsNoReader(t *testing.T) {
	s, addr := testServer(t)
	dev := benchMQTTDial(t, addr, "no-reader", 4, "no-reader/cmd")
	c := serverConn(t, s, "no-reader")
	_ = dev.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i := range 3 {
		if !waitParked(c, 10*time.Second) {
			t.Fatalf("round %d: not parked", i)
		}
		// Take the connection as a wake does (so that reading c.br is
		// ordered with its next reader's writes), look, and hand it back:
		// it reads on and parks again.
		if !c.parked.CompareAndSwap(true, false) {
			t.Fatalf("round %d: woken meanwhile", i)
		}
		held := c.br != nil
		go c.readOn(false)
		if held {
			t.Fatalf("round %d: a parked connection holds its reader", i)
		}
		if !waitParked(c, 10*time.Second) {
			t.Fatalf("round %d: not parked again", i)
		}
		if _, err := dev.Write([]byte{packets.Pingreq << 4, 0}); err != nil {
			t.Fatal(err)
		}
		if first, _ := benchReadPacket(t, dev); first>>4 != packets.Pingresp {
			t.Fatalf("round %d: PINGRESP: %x", i, first)
		}
	}
}

// TestSubscriptionStringsInterned: devices subscribed to the same
// wildcard filter share its bytes and those of its binding key; an exact
// filter is a copy of its own (one device's topic: sharing it would cost
// more than it saves); neither is a view of a SUBSCRIBE packet.
func TestSubscriptionStringsInterned(t *testing.T) {
	s, addr := testServer(t)
	benchMQTTDial(t, addr, "intern-a", 4, "fleet/all/#")
	benchMQTTDial(t, addr, "intern-b", 4, "fleet/all/#")
	benchMQTTDial(t, addr, "intern-c", 4, "fleet/dev/1")
	benchMQTTDial(t, addr, "intern-d", 4, "fleet/dev/1")
	sub := func(id string) *subscription {
		l := serverConn(t, s, id).se.subList()
		if len(l) != 1 {
			t.Fatalf("%s: %d subscriptions", id, len(l))
		}
		return l[0]
	}
	a, b, c, d := sub("intern-a"), sub("intern-b"), sub("intern-c"), sub("intern-d")
	if a.Filter != "fleet/all/#" || a.key() != "fleet.all.#" || c.Filter != "fleet/dev/1" || c.key() != "fleet.dev.1" {
		t.Fatalf("filters %q %q, keys %q %q", a.Filter, c.Filter, a.key(), c.key())
	}
	if unsafe.StringData(a.Filter) != unsafe.StringData(b.Filter) || unsafe.StringData(a.key()) != unsafe.StringData(b.key()) {
		t.Error("two devices' subscriptions to one wildcard filter each keep a copy of it or of its key")
	}
	if unsafe.StringData(c.Filter) == unsafe.StringData(d.Filter) {
		t.Error("an exact filter is interned")
	}
}
