package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// h decodes hex with spaces, for readable goldens.
func h(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// goldens are client frames' payloads (key onwards) and what they decode
// to, byte for byte as PROTOCOL.adoc lays them out.
var goldens = []struct {
	name string
	in   []byte
	want Frame
}{
	{"peer properties", h("0011 0001 00000001 00000001 0007 70726f64756374 0002 676f"),
		PeerProperties{Corr: 1, Props: []KV{{"product", "go"}}}},
	{"sasl handshake", h("0012 0001 00000002"), SaslHandshake{Corr: 2}},
	{"sasl authenticate plain", h("0013 0001 00000003 0005 504c41494e 0000000a 00677565737400677565"),
		SaslAuthenticate{Corr: 3, Mechanism: "PLAIN", Data: []byte("\x00guest\x00gue")}},
	{"sasl authenticate null data", h("0013 0001 00000003 0008 45585445524e414c ffffffff"),
		SaslAuthenticate{Corr: 3, Mechanism: "EXTERNAL"}},
	{"tune response bit", h("8014 0001 00100000 0000003c"), Tune{FrameMax: 1 << 20, Heartbeat: 60}},
	{"tune without it", h("0014 0001 00000000 00000000"), Tune{}},
	{"open", h("0015 0001 00000004 0001 2f"), Open{Corr: 4, VHost: "/"}},
	{"close", h("0016 0001 00000005 0001 0002 6279"), Close{Corr: 5, Code: OK, Reason: "by"}},
	{"close response", h("8016 0001 00000005 0001"), CloseResponse{Corr: 5, Code: OK}},
	{"heartbeat", h("0017 0001"), Heartbeat{}},
	{"declare publisher", h("0001 0001 00000006 07 ffff 0001 73"),
		DeclarePublisher{Corr: 6, ID: 7, Stream: "s"}},
	{"publish v1", h("0002 0001 07 00000002 0000000000000001 00000001 61 0000000000000002 00000000"),
		Publish{Version: 1, ID: 7, Messages: []PublishedMessage{{ID: 1, Data: []byte("a")}, {ID: 2, Data: []byte{}}}}},
	{"publish v2", h("0002 0002 07 00000001 0000000000000009 0002 6575 00000001 62"),
		Publish{Version: 2, ID: 7, Messages: []PublishedMessage{{ID: 9, Filter: "eu", Data: []byte("b")}}}},
	{"publish v2 null filter", h("0002 0002 07 00000001 000000000000000a ffff 00000001 63"),
		Publish{Version: 2, ID: 7, Messages: []PublishedMessage{{ID: 10, Data: []byte("c")}}}},
	{"query publisher sequence", h("0005 0001 00000007 0001 70 0001 73"),
		QueryPublisherSequence{Corr: 7, Reference: "p", Stream: "s"}},
	{"delete publisher", h("0006 0001 00000008 07"), DeletePublisher{Corr: 8, ID: 7}},
	{"subscribe first", h("0007 0001 00000009 01 0001 73 0001 000a 00000000"),
		Subscribe{Corr: 9, ID: 1, Stream: "s", OffsetType: OffsetFirst, Credit: 10}},
	{"subscribe offset with properties", h("0007 0001 00000009 01 0001 73 0004 0000000000000064 0001 00000001 0004 6e616d65 0001 63"),
		Subscribe{Corr: 9, ID: 1, Stream: "s", OffsetType: OffsetOffset, Offset: 100, Credit: 1, Props: []KV{{"name", "c"}}}},
	{"subscribe timestamp, no properties", h("0007 0001 00000009 01 0001 73 0005 0000018c00000000 0002"),
		Subscribe{Corr: 9, ID: 1, Stream: "s", OffsetType: OffsetTimestamp, Offset: 0x18c00000000, Credit: 2}},
	{"credit", h("0009 0001 01 0005"), Credit{ID: 1, Credit: 5}},
	{"store offset", h("000a 0001 0001 63 0001 73 000000000000002a"), StoreOffset{Reference: "c", Stream: "s", Offset: 42}},
	{"query offset", h("000b 0001 0000000a 0001 63 0001 73"), QueryOffset{Corr: 10, Reference: "c", Stream: "s"}},
	{"unsubscribe", h("000c 0001 0000000b 01"), Unsubscribe{Corr: 11, ID: 1}},
	{"create", h("000d 0001 0000000c 0001 73 00000001 0007 6d61782d616765 0003 3130730a"[:len("000d 0001 0000000c 0001 73 00000001 0007 6d61782d616765 0003 313073")]),
		Create{Corr: 12, Stream: "s", Args: []KV{{"max-age", "10s"}}}},
	{"delete", h("000e 0001 0000000d 0001 73"), Delete{Corr: 13, Stream: "s"}},
	{"metadata", h("000f 0001 0000000e 00000002 0001 61 0001 62"), Metadata{Corr: 14, Streams: []string{"a", "b"}}},
	{"exchange command versions", h("001b 0001 0000000f 00000001 0008 0001 0002"),
		ExchangeCommandVersions{Corr: 15, Commands: []CommandVersion{{Key: 8, Min: 1, Max: 2}}}},
	{"stream stats", h("001c 0001 00000010 0001 73"), StreamStats{Corr: 16, Stream: "s"}},
	{"route", h("0018 0001 00000011 0001 6b 0002 7373"), Route{Corr: 17, RoutingKey: "k", SuperStream: "ss"}},
	{"partitions", h("0019 0001 00000012 0002 7373"), Partitions{Corr: 18, SuperStream: "ss"}},
	{"consumer update response", h("801a 0001 00000013 0001 0004 0000000000000005"),
		ConsumerUpdateResponse{Corr: 19, Code: OK, OffsetType: OffsetOffset, Offset: 5}},
	{"delete super stream", h("001e 0001 00000014 0002 7373"), DeleteSuperStream{Corr: 20, Name: "ss"}},
}

// badGoldens do not decode, with the error they give.
var badGoldens = []struct {
	name string
	in   []byte
	want error
}{
	{"too short", h("00"), ErrMalformed},
	{"unknown key", h("00ff 0001 00000001"), &UnknownKeyError{Key: 0xff, Corr: 1}},
	{"server-only key", h("0008 0001 00000001"), &UnknownKeyError{Key: 8, Corr: 1}},
	{"string past the end", h("0015 0001 00000004 0009 2f"), ErrMalformed},
	{"negative string length", h("0015 0001 00000004 fffe"), ErrMalformed},
	{"bytes left over", h("0012 0001 00000002 00"), ErrMalformed},
	{"huge array", h("000f 0001 0000000e 7fffffff 0001 61"), ErrMalformed},
	{"huge publish batch", h("0002 0001 07 10000000 0000000000000001 00000001 61"), ErrMalformed},
	{"message past the end", h("0002 0001 07 00000001 0000000000000001 000000ff 61"), ErrMalformed},
}

func TestDecodeGolden(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			got, err := Decode(g.in)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, g.want) {
				t.Fatalf("got %#v\nwant %#v", got, g.want)
			}
			if k := uint16(g.in[0])<<8 | uint16(g.in[1]); Key(got) != k && Key(got) != k&^ResponseBit {
				t.Fatalf("Key %#x", Key(got))
			}
		})
	}
	for _, g := range badGoldens {
		t.Run(g.name, func(t *testing.T) {
			_, err := Decode(g.in)
			var uk *UnknownKeyError
			if errors.As(g.want, &uk) {
				var got *UnknownKeyError
				if !errors.As(err, &got) || *got != *uk {
					t.Fatalf("err %v, want %v", err, g.want)
				}
				return
			}
			if !errors.Is(err, g.want) {
				t.Fatalf("err %v, want %v", err, g.want)
			}
		})
	}
}

// serverGoldens are what the Append functions write, size included.
var serverGoldens = []struct {
	name string
	got  []byte
	want []byte
}{
	{"generic response", AppendResponse(nil, KeyCreate, 12, StreamAlreadyExists), h("0000000a 800d 0001 0000000c 0005")},
	{"peer properties", AppendPeerPropertiesResponse(nil, 1, OK, []KV{{"a", "b"}}), h("00000014 8011 0001 00000001 0001 00000001 0001 61 0001 62")},
	{"sasl handshake", AppendSaslHandshakeResponse(nil, 2, OK, []string{"PLAIN"}), h("00000015 8012 0001 00000002 0001 00000001 0005 504c41494e")},
	{"tune", AppendTune(nil, 1<<20, 60), h("0000000c 0014 0001 00100000 0000003c")},
	{"open refused", AppendOpenResponse(nil, 4, VHostAccessFailure, nil), h("0000000e 8015 0001 00000004 000c 00000000")},
	{"close", AppendClose(nil, 1, FrameTooLarge, "x"), h("0000000d 0016 0001 00000001 000e 0001 78")},
	{"heartbeat", AppendHeartbeat(nil), h("00000004 0017 0001")},
	{"publish confirm", AppendPublishConfirm(nil, 7, []uint64{1, 2}), h("00000019 0003 0001 07 00000002 0000000000000001 0000000000000002")},
	{"publish error", AppendPublishError(nil, 7, []PublishingError{{ID: 3, Code: StreamDoesNotExist}}), h("00000013 0004 0001 07 00000001 0000000000000003 0002")},
	{"query publisher sequence", AppendQueryPublisherSequenceResponse(nil, 7, OK, 0), h("00000012 8005 0001 00000007 0001 0000000000000000")},
	{"credit response", AppendCreditResponse(nil, SubscriptionIDNotExist, 3), h("00000007 8009 0001 0004 03")},
	{"query offset", AppendQueryOffsetResponse(nil, 10, NoOffset, 0), h("00000012 800b 0001 0000000a 0013 0000000000000000")},
	{"metadata", AppendMetadataResponse(nil, 14, []Broker{{Ref: 0, Host: "h", Port: 5552}},
		[]StreamMetadata{{Stream: "a", Code: OK, Leader: 0}, {Stream: "b", Code: StreamDoesNotExist, Leader: 0xffff}}),
		h("0000002f 800f 0001 0000000e 00000001 0000 0001 68 000015b0 00000002 0001 61 0001 0000 00000000 0001 62 0002 ffff 00000000")},
	{"metadata update", AppendMetadataUpdate(nil, StreamNotAvailable, "s"), h("00000009 0010 0001 0006 0001 73")},
	{"consumer update", AppendConsumerUpdate(nil, 9, 3, true), h("0000000a 001a 0001 00000009 03 01")},
	{"command versions", AppendExchangeCommandVersionsResponse(nil, 15, OK, []CommandVersion{{8, 1, 1}}),
		h("00000014 801b 0001 0000000f 0001 00000001 0008 0001 0001")},
	{"stream stats", AppendStreamStatsResponse(nil, 16, OK, []Stat{{"k", -1}}),
		h("00000019 801c 0001 00000010 0001 00000001 0001 6b ffffffffffffffff")},
	{"partitions", AppendStreamsResponse(nil, KeyPartitions, 18, OK, []string{"s-0"}),
		h("00000013 8019 0001 00000012 0001 00000001 0003 732d30")},
}

func TestEncodeGolden(t *testing.T) {
	for _, g := range serverGoldens {
		if !bytes.Equal(g.got, g.want) {
			t.Errorf("%s:\n got %x\nwant %x", g.name, g.got, g.want)
		}
	}
}

func TestReadFrameBounds(t *testing.T) {
	frame := AppendHeartbeat(nil)
	p, err := ReadFrame(bytes.NewReader(frame), 8, nil)
	if err != nil || !bytes.Equal(p, frame[4:]) {
		t.Fatalf("ReadFrame = %x, %v", p, err)
	}
	// A size over the bound is refused before anything is read past it.
	big := h("7fffffff 0011 0001")
	r := bytes.NewReader(big)
	if _, err := ReadFrame(r, 8192, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if r.Len() != 4 {
		t.Fatalf("read %d bytes past the size", 4-r.Len())
	}
	if _, err := ReadFrame(bytes.NewReader(h("00000002 0011")), 8192, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("tiny frame: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader(h("00000008 0011 0001")), 8192, nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated: %v", err)
	}
}

func TestChunkRoundTrip(t *testing.T) {
	msgs := [][]byte{[]byte("one"), {}, bytes.Repeat([]byte("x"), 300)}
	b, c := BeginDeliver([]byte("prefix"), 3, 1000, 1234)
	for _, m := range msgs {
		b = c.Add(b, m)
	}
	b = c.End(b)
	p, err := ReadFrame(bytes.NewReader(b[len("prefix"):]), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := ParseDeliver(p)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Sub != 3 || pc.First != 1000 || pc.Timestamp != 1234 || len(pc.Messages) != 3 || !bytes.Equal(pc.Messages[2], msgs[2]) {
		t.Fatalf("parsed %+v", pc)
	}
	p[len(p)-1] ^= 1 // the CRC covers the data
	if _, err := ParseDeliver(p); err == nil {
		t.Fatal("corrupt chunk parsed")
	}
}

// FuzzDecode feeds arbitrary bytes as a stream of frames, whole and split
// at a point the fuzzer picks: no panic, both feedings agree, and every
// decoded frame re-decodes the same from the same bytes (Decode is pure).
func FuzzDecode(f *testing.F) {
	for _, g := range goldens {
		f.Add(be32(nil, uint32(len(g.in))), g.in, uint16(len(g.in)/2))
	}
	for _, g := range badGoldens {
		f.Add(be32(nil, uint32(len(g.in))), g.in, uint16(1))
	}
	f.Fuzz(func(t *testing.T, size, in []byte, split uint16) {
		data := append(append([]byte{}, size...), in...)
		whole := decodeAll(bytes.NewReader(data))
		cut := int(split) % (len(data) + 1)
		parts := decodeAll(io.MultiReader(bytes.NewReader(data[:cut]), bytes.NewReader(data[cut:])))
		if len(whole) != len(parts) {
			t.Fatalf("whole %d frames, split %d", len(whole), len(parts))
		}
		for i := range whole {
			if !reflect.DeepEqual(whole[i], parts[i]) {
				t.Fatalf("frame %d: %#v vs %#v", i, whole[i], parts[i])
			}
		}
	})
}

type decoded struct {
	f   Frame
	err string
}

func decodeAll(r io.Reader) []decoded {
	var out []decoded
	for {
		p, err := ReadFrame(r, 4096, nil)
		if err != nil {
			return out
		}
		f, err := Decode(p)
		d := decoded{f: f}
		if err != nil {
			d.err = err.Error()
		}
		if pub, ok := f.(Publish); ok {
			for _, m := range pub.Messages {
				if len(m.Data) > len(p) {
					panic("message larger than its frame")
				}
			}
		}
		out = append(out, d)
	}
}
