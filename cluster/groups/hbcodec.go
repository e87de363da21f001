package groups

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// The coalesced heartbeat stream's frames (heartbeat.go). Every frame is
//
//	u32 length of the rest | u8 kind | body
//
// with kind hbRequest:
//
//	u64 seq | str group | u64 term | bytes leader | u8 protocol | bytes id | bytes addr
//
// and kind hbResponse:
//
//	u64 seq | u8 status | status 0: u64 term | u64 last log | u8 flags | u8 protocol | bytes id | bytes addr
//	                      status 1: str error
//
// str and bytes are a u16 length and that many bytes; flags bit 0 is
// Success, bit 1 NoRetryBackoff. A request is a raft heartbeat (an
// AppendEntriesRequest with a term, a leader and nothing else), its
// response the AppendEntriesResponse or the error of the group's member;
// or, with term 0 (which no raft heartbeat has), a probe: status 0 if the
// group runs on the receiver, else 1.

const (
	hbRequest  = 1
	hbResponse = 2
	// hbMaxFrame bounds a frame's length field: a request holds three
	// short fields and a group name.
	hbMaxFrame = 1 << 16
)

// errHBFrame is a malformed coalesced heartbeat frame.
var errHBFrame = errors.New("groups: malformed heartbeat frame")

type hbReq struct {
	seq   uint64
	group string
	req   raft.AppendEntriesRequest
}

type hbResp struct {
	seq  uint64
	err  string // not empty: the member's error, resp is zero
	resp raft.AppendEntriesResponse
}

// isHeartbeat reports whether req is a raft heartbeat (as
// raft.NetworkTransport tells them apart).
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return req.Term != 0 && (len(req.Addr) > 0 || len(req.Leader) > 0) &&
		req.PrevLogEntry == 0 && req.PrevLogTerm == 0 && len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}

func appendShort(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendHeader(b []byte, h raft.RPCHeader) []byte {
	b = append(b, byte(h.ProtocolVersion))
	b = appendShort(b, h.ID)
	return appendShort(b, h.Addr)
}

func begin(b []byte, kind byte) ([]byte, int) {
	at := len(b)
	b = append(b, 0, 0, 0, 0, kind)
	return b, at
}

func finish(b []byte, at int) []byte {
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

func shortOK(f ...[]byte) error {
	for _, s := range f {
		if len(s) > 0xffff {
			return fmt.Errorf("groups: heartbeat field of %d bytes", len(s))
		}
	}
	return nil
}

// appendHBReq appends r's frame to b.
func appendHBReq(b []byte, r *hbReq) ([]byte, error) {
	if err := shortOK([]byte(r.group), r.req.Leader, r.req.ID, r.req.Addr); err != nil {
		return b, err
	}
	b, at := begin(b, hbRequest)
	b = binary.BigEndian.AppendUint64(b, r.seq)
	b = appendShort(b, []byte(r.group))
	b = binary.BigEndian.AppendUint64(b, r.req.Term)
	b = appendShort(b, r.req.Leader)
	b = appendHeader(b, r.req.RPCHeader)
	return finish(b, at), nil
}

// appendHBResp appends r's frame to b.
func appendHBResp(b []byte, r *hbResp) []byte {
	msg := r.err
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	h := r.resp.RPCHeader
	if shortOK(h.ID, h.Addr) != nil {
		h.ID, h.Addr = nil, nil
	}
	b, at := begin(b, hbResponse)
	b = binary.BigEndian.AppendUint64(b, r.seq)
	if msg != "" {
		b = append(b, 1)
		b = appendShort(b, []byte(msg))
		return finish(b, at)
	}
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, r.resp.Term)
	b = binary.BigEndian.AppendUint64(b, r.resp.LastLog)
	var flags byte
	if r.resp.Success {
		flags |= 1
	}
	if r.resp.NoRetryBackoff {
		flags |= 2
	}
	b = append(b, flags)
	b = appendHeader(b, h)
	return finish(b, at)
}

// hbDecoder reads fields off one frame's body.
type hbDecoder struct {
	b   []byte
	bad bool
}

func (d *hbDecoder) u8() byte {
	if len(d.b) < 1 {
		d.bad = true
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *hbDecoder) u64() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *hbDecoder) short() []byte {
	if len(d.b) < 2 {
		d.bad = true
		return nil
	}
	n := int(binary.BigEndian.Uint16(d.b))
	if len(d.b) < 2+n {
		d.bad = true
		return nil
	}
	v := append([]byte(nil), d.b[2:2+n]...)
	d.b = d.b[2+n:]
	return v
}

func (d *hbDecoder) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersion(d.u8()), ID: d.short(), Addr: d.short()}
}

// splitHBFrame returns the kind and body of the first frame of b and the
// length it takes, or n == 0 if b does not hold a whole frame yet.
func splitHBFrame(b []byte) (kind byte, body []byte, n int, err error) {
	if len(b) < 4 {
		return 0, nil, 0, nil
	}
	l := int(binary.BigEndian.Uint32(b))
	if l < 1 || l > hbMaxFrame {
		return 0, nil, 0, fmt.Errorf("%w: length %d", errHBFrame, l)
	}
	if len(b) < 4+l {
		return 0, nil, 0, nil
	}
	return b[4], b[5 : 4+l], 4 + l, nil
}

// decodeHBReq decodes a hbRequest frame's body.
func decodeHBReq(body []byte) (hbReq, error) {
	d := hbDecoder{b: body}
	var r hbReq
	r.seq = d.u64()
	r.group = string(d.short())
	r.req.Term = d.u64()
	r.req.Leader = d.short()
	r.req.RPCHeader = d.header()
	if d.bad || len(d.b) != 0 || r.group == "" {
		return hbReq{}, fmt.Errorf("%w: request", errHBFrame)
	}
	return r, nil
}

// decodeHBResp decodes a hbResponse frame's body.
func decodeHBResp(body []byte) (hbResp, error) {
	d := hbDecoder{b: body}
	var r hbResp
	r.seq = d.u64()
	switch d.u8() {
	case 0:
		r.resp.Term = d.u64()
		r.resp.LastLog = d.u64()
		flags := d.u8()
		r.resp.Success, r.resp.NoRetryBackoff = flags&1 != 0, flags&2 != 0
		r.resp.RPCHeader = d.header()
	case 1:
		r.err = string(d.short())
		if r.err == "" {
			d.bad = true
		}
	default:
		d.bad = true
	}
	if d.bad || len(d.b) != 0 {
		return hbResp{}, fmt.Errorf("%w: response", errHBFrame)
	}
	return r, nil
}
