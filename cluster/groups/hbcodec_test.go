package groups

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

var hbGoldenReqs = []hbReq{
	{seq: 1, group: "meta", req: raft.AppendEntriesRequest{Term: 3, Leader: []byte("127.0.0.1:25673"),
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n0"), Addr: []byte("127.0.0.1:25673")}}},
	{seq: 1<<64 - 1, group: "q/1f", req: raft.AppendEntriesRequest{Term: 1, RPCHeader: raft.RPCHeader{Addr: []byte("a")}}},
}

var hbGoldenResps = []hbResp{
	{seq: 7, resp: raft.AppendEntriesResponse{Term: 3, LastLog: 99, Success: true,
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n1"), Addr: []byte("127.0.0.1:25674")}}},
	{seq: 8, resp: raft.AppendEntriesResponse{Term: 4, NoRetryBackoff: true}},
	{seq: 9, err: "group q/2 not running here"},
}

// normalize makes the nil and empty byte slices of a decoded value alike.
func normalize(h *raft.RPCHeader, leader *[]byte) {
	for _, b := range []*[]byte{&h.ID, &h.Addr, leader} {
		if b != nil && len(*b) == 0 {
			*b = nil
		}
	}
}

func TestHBCodecGolden(t *testing.T) {
	var stream []byte
	for _, r := range hbGoldenReqs {
		var err error
		if stream, err = appendHBReq(stream, &r); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range hbGoldenResps {
		stream = appendHBResp(stream, &r)
	}
	// The first request, byte for byte.
	want := []byte{0, 0, 0, 0x3e, hbRequest, 0, 0, 0, 0, 0, 0, 0, 1, 0, 4, 'm', 'e', 't', 'a', 0, 0, 0, 0, 0, 0, 0, 3, 0, 15}
	if got := stream[:len(want)]; !reflect.DeepEqual(got, want) {
		t.Fatalf("first frame starts % x, want % x", got, want)
	}
	var reqs []hbReq
	var resps []hbResp
	for len(stream) > 0 {
		kind, body, n, err := splitHBFrame(stream)
		if err != nil || n == 0 {
			t.Fatalf("split: n %d, %v", n, err)
		}
		// A frame cut short is not whole yet.
		if _, _, m, err := splitHBFrame(stream[:n-1]); m != 0 || err != nil {
			t.Fatalf("short frame: n %d, %v", m, err)
		}
		switch kind {
		case hbRequest:
			r, err := decodeHBReq(body)
			if err != nil {
				t.Fatal(err)
			}
			normalize(&r.req.RPCHeader, &r.req.Leader)
			reqs = append(reqs, r)
		case hbResponse:
			r, err := decodeHBResp(body)
			if err != nil {
				t.Fatal(err)
			}
			normalize(&r.resp.RPCHeader, nil)
			resps = append(resps, r)
		}
		stream = stream[n:]
	}
	if !reflect.DeepEqual(reqs, hbGoldenReqs) {
		t.Errorf("requests\n%+v\nwant\n%+v", reqs, hbGoldenReqs)
	}
	if !reflect.DeepEqual(resps, hbGoldenResps) {
		t.Errorf("responses\n%+v\nwant\n%+v", resps, hbGoldenResps)
	}
}

func TestHBCodecBad(t *testing.T) {
	for name, b := range map[string][]byte{
		"zero length": {0, 0, 0, 0, 1},
		"too long":    {0, 2, 0, 0, 1},
	} {
		if _, _, _, err := splitHBFrame(b); !errors.Is(err, errHBFrame) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := decodeHBReq([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0}); !errors.Is(err, errHBFrame) {
		t.Errorf("empty group: %v", err)
	}
	if _, err := decodeHBResp([]byte{0, 0, 0, 0, 0, 0, 0, 1, 7}); !errors.Is(err, errHBFrame) {
		t.Errorf("bad status: %v", err)
	}
	if !isHeartbeat(&hbGoldenReqs[0].req) || isHeartbeat(&raft.AppendEntriesRequest{Term: 1, Leader: []byte("a"), LeaderCommitIndex: 2}) {
		t.Error("isHeartbeat")
	}
}

// FuzzHBFrames feeds streams of frames, whole and cut at random points,
// to the decoders: they return frames or errHBFrame, never panic.
func FuzzHBFrames(f *testing.F) {
	var stream []byte
	for _, r := range hbGoldenReqs {
		stream, _ = appendHBReq(stream, &r)
	}
	for _, r := range hbGoldenResps {
		stream = appendHBResp(stream, &r)
	}
	f.Add(stream, uint64(0))
	f.Add(stream[:17], uint64(1))
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var buf []byte
		for len(b) > 0 {
			n := 1 + rng.IntN(len(b))
			buf, b = append(buf, b[:n]...), b[n:]
			for {
				kind, body, used, err := splitHBFrame(buf)
				if err != nil {
					if !errors.Is(err, errHBFrame) {
						t.Fatal(err)
					}
					return
				}
				if used == 0 {
					break
				}
				if kind == hbRequest {
					_, err = decodeHBReq(body)
				} else {
					_, err = decodeHBResp(body)
				}
				if err != nil && !errors.Is(err, errHBFrame) {
					t.Fatal(err)
				}
				buf = buf[used:]
			}
		}
	})
}
