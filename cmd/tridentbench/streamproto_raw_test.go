package main

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/trident-broker/trident/protocol/stream/wire"
)

// The raw stream client's encoders against the broker's decoder: every
// client frame it writes decodes to what it meant.
func TestRawStreamClientFramesDecode(t *testing.T) {
	cases := []struct {
		name  string
		frame []byte
		want  wire.Frame
	}{
		{"peer properties", spPeerProperties(nil, 1, "product", "tridentbench"),
			wire.PeerProperties{Corr: 1, Props: []wire.KV{{Key: "product", Value: "tridentbench"}}}},
		{"sasl handshake", spSaslHandshake(nil, 2), wire.SaslHandshake{Corr: 2}},
		{"sasl plain", spSaslPlain(nil, 3, "guest", "pw"),
			wire.SaslAuthenticate{Corr: 3, Mechanism: "PLAIN", Data: []byte("\x00guest\x00pw")}},
		{"tune answer", spTuneOK(nil, 1<<20, 0), wire.Tune{FrameMax: 1 << 20}},
		{"open", spOpen(nil, 4, "/"), wire.Open{Corr: 4, VHost: "/"}},
		{"create", spCreate(nil, 5, "s1"), wire.Create{Corr: 5, Stream: "s1", Args: []wire.KV{}}},
		{"delete", spDelete(nil, 6, "s1"), wire.Delete{Corr: 6, Stream: "s1"}},
		{"declare publisher", spDeclarePublisher(nil, 7, 3, "s1"), wire.DeclarePublisher{Corr: 7, ID: 3, Stream: "s1"}},
		{"subscribe from first", spSubscribe(nil, 8, 9, "s1", wire.OffsetFirst, 10),
			wire.Subscribe{Corr: 8, ID: 9, Stream: "s1", OffsetType: wire.OffsetFirst, Credit: 10, Props: []wire.KV{}}},
		{"credit", spCredit(nil, 9, 4), wire.Credit{ID: 9, Credit: 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, n, err := spFrame(tc.frame, 1<<20)
			if err != nil || n != len(tc.frame) {
				t.Fatalf("spFrame: n %d of %d, %v", n, len(tc.frame), err)
			}
			got, err := wire.Decode(p)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if wire.Key(got) != wire.Key(tc.want) || !reflect.DeepEqual(normKV(got), normKV(tc.want)) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

// normKV makes empty and nil lists equal.
func normKV(f wire.Frame) wire.Frame {
	switch v := f.(type) {
	case wire.Create:
		if len(v.Args) == 0 {
			v.Args = nil
		}
		return v
	case wire.Subscribe:
		if len(v.Props) == 0 {
			v.Props = nil
		}
		return v
	case wire.PeerProperties:
		if len(v.Props) == 0 {
			v.Props = nil
		}
		return v
	}
	return f
}

// A publish template decodes to k messages with consecutive publishing
// ids after each setIDs, each an AMQP 1.0 message with the body.
func TestRawStreamPublishTemplate(t *testing.T) {
	for _, size := range []int{16, 300} {
		body := bytes.Repeat([]byte{0xab}, size)
		tpl := newSPPublish(2, 5, spAMQPData(body))
		for _, first := range []uint64{1, 1 << 40} {
			tpl.setIDs(first)
			p, n, err := spFrame(tpl.frame, 1<<20)
			if err != nil || n != len(tpl.frame) {
				t.Fatalf("spFrame: %d, %v", n, err)
			}
			f, err := wire.Decode(p)
			if err != nil {
				t.Fatal(err)
			}
			pub := f.(wire.Publish)
			if pub.ID != 2 || len(pub.Messages) != 5 {
				t.Fatalf("publisher %d, %d messages", pub.ID, len(pub.Messages))
			}
			for i, m := range pub.Messages {
				if m.ID != first+uint64(i) {
					t.Errorf("message %d: publishing id %d, want %d", i, m.ID, first+uint64(i))
				}
				msg, err := wire.DecodeMessage(m.Data)
				if err != nil || !bytes.Equal(msg.Body, body) {
					t.Fatalf("message %d: body %x, %v", i, msg.Body, err)
				}
			}
		}
	}
}

// The reader's chunk header parse against the broker's Deliver encoder.
func TestRawStreamDeliverHeader(t *testing.T) {
	b, ch := wire.BeginDeliver(nil, 7, 1234, 99)
	for i := range 300 {
		b = ch.Add(b, spAMQPData([]byte{byte(i)}))
	}
	b = ch.End(b)
	p, n, err := spFrame(b, 1<<20)
	if err != nil || n != len(b) {
		t.Fatalf("spFrame: %d, %v", n, err)
	}
	c, err := spDeliver(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.sub != 7 || c.first != 1234 || c.records != 300 || c.typ != 0 {
		t.Fatalf("got %+v", c)
	}

	// Version 2 carries the committed offset before the chunk.
	v2 := append([]byte(nil), p[:5]...)
	binary.BigEndian.PutUint16(v2[2:], 2)
	v2 = binary.BigEndian.AppendUint64(v2, 5000)
	v2 = append(v2, p[5:]...)
	if c2, err := spDeliver(v2); err != nil || c2 != c {
		t.Fatalf("version 2: %+v, %v", c2, err)
	}

	// A chunk whose data is not all there, or with a bad magic, is refused.
	if _, err := spDeliver(p[:len(p)-1]); err == nil {
		t.Error("short chunk accepted")
	}
	if _, err := spDeliver(append(append([]byte(nil), p...), 0)); err == nil {
		t.Error("chunk with a byte more than it announces accepted")
	}
	bad := append([]byte(nil), p...)
	bad[5] = 0x10
	if _, err := spDeliver(bad); err == nil {
		t.Error("bad magic accepted")
	}
	if _, err := spDeliver(p[:20]); err == nil {
		t.Error("truncated header accepted")
	}

	// Frames are found whole or not at all; a size over the bound fails.
	for i := range len(b) {
		if _, n, err := spFrame(b[:i], 1<<20); n != 0 || err != nil {
			t.Fatalf("prefix of %d bytes: n %d, %v", i, n, err)
		}
	}
	if _, _, err := spFrame(b, uint32(len(b)-5)); err == nil {
		t.Error("frame over the bound accepted")
	}
}
