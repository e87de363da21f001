package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/exchange"
)

// The codecs of the metadata group: a Raft log entry (a batch of
// exchange.MetaOp), a snapshot, and the forwarding RPC's frames. All are
// pure: bytes in, values or a typed error out.

// Codec errors.
var (
	// ErrBadEntry means a log entry or RPC request that does not decode.
	ErrBadEntry = errors.New("meta: bad entry")
	// ErrBadSnapshot means a snapshot that does not decode.
	ErrBadSnapshot = errors.New("meta: bad snapshot")
)

// entryVersion is the first byte of every encoded entry.
const entryVersion = 1

// Op flags in an encoded entry.
const (
	flagPrefix = 1 << 0
	flagVal    = 1 << 1 // a put: a value follows (possibly empty)
	flagCreate = 1 << 2 // with flagVal: a put only where the key is free (MetaOp.Create)
)

// EncodeOps encodes ops as one log entry:
//
//	version 1 | uvarint count | count × (flags | uvarint len | key [| uvarint len | val])
//
// A nil Val is a delete, a non-nil one (even empty) a put; flags say
// which, a prefix delete, and a create (a put with MetaOp.Create).
func EncodeOps(ops []exchange.MetaOp) []byte {
	n := 1 + binary.MaxVarintLen64
	for _, op := range ops {
		n += 1 + 2*binary.MaxVarintLen64 + len(op.Key) + len(op.Val)
	}
	b := make([]byte, 0, n)
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, op := range ops {
		var f byte
		if op.Prefix {
			f |= flagPrefix
		}
		if op.Val != nil && !op.Prefix {
			f |= flagVal
			if op.Create {
				f |= flagCreate
			}
		}
		b = append(b, f)
		b = appendBytes(b, []byte(op.Key))
		if f&flagVal != 0 {
			b = appendBytes(b, op.Val)
		}
	}
	return b
}

// DecodeOps decodes an entry made by EncodeOps. Values alias b.
func DecodeOps(b []byte) ([]exchange.MetaOp, error) {
	if len(b) == 0 || b[0] != entryVersion {
		return nil, fmt.Errorf("%w: version", ErrBadEntry)
	}
	b = b[1:]
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)) { // every op takes at least two bytes
		return nil, fmt.Errorf("%w: count", ErrBadEntry)
	}
	b = b[k:]
	ops := make([]exchange.MetaOp, 0, count)
	for range count {
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: truncated", ErrBadEntry)
		}
		f := b[0]
		if f&^(flagPrefix|flagVal|flagCreate) != 0 || f&(flagPrefix|flagVal) == flagPrefix|flagVal ||
			(f&flagCreate != 0 && f&flagVal == 0) {
			return nil, fmt.Errorf("%w: flags %#x", ErrBadEntry, f)
		}
		key, rest, ok := readBytes(b[1:])
		if !ok {
			return nil, fmt.Errorf("%w: truncated key", ErrBadEntry)
		}
		op := exchange.MetaOp{Key: string(key), Prefix: f&flagPrefix != 0, Create: f&flagCreate != 0}
		if f&flagVal != 0 {
			val, r, ok := readBytes(rest)
			if !ok {
				return nil, fmt.Errorf("%w: truncated value", ErrBadEntry)
			}
			op.Val, rest = val, r
			if op.Val == nil {
				op.Val = []byte{}
			}
		}
		ops = append(ops, op)
		b = rest
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadEntry, len(b))
	}
	return ops, nil
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// readBytes reads a uvarint length and that many bytes (aliasing b).
func readBytes(b []byte) (v, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	b = b[k:]
	return b[:n:n], b[n:], true
}

// snapshotMagic opens a snapshot:
//
//	"TMS1" | uint64 applied index, big endian | records (uvarint len | key | uvarint len | val)...
const snapshotMagic = "TMS1"

// appendSnapshotHeader starts a snapshot holding the records applied up
// to index.
func appendSnapshotHeader(b []byte, index uint64) []byte {
	b = append(b, snapshotMagic...)
	return binary.BigEndian.AppendUint64(b, index)
}

// appendRecord appends one record to a snapshot.
func appendRecord(b []byte, key string, val []byte) []byte {
	return appendBytes(appendBytes(b, []byte(key)), val)
}

// decodeSnapshot decodes a whole snapshot. Values alias b.
func decodeSnapshot(b []byte) (index uint64, records map[string][]byte, err error) {
	if len(b) < len(snapshotMagic)+8 || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return 0, nil, fmt.Errorf("%w: header", ErrBadSnapshot)
	}
	index = binary.BigEndian.Uint64(b[len(snapshotMagic):])
	b = b[len(snapshotMagic)+8:]
	records = map[string][]byte{}
	for len(b) > 0 {
		k, rest, ok := readBytes(b)
		if !ok {
			return 0, nil, fmt.Errorf("%w: truncated key", ErrBadSnapshot)
		}
		v, rest, ok := readBytes(rest)
		if !ok {
			return 0, nil, fmt.Errorf("%w: truncated value", ErrBadSnapshot)
		}
		if v == nil {
			v = []byte{}
		}
		records[string(k)] = v
		b = rest
	}
	return index, records, nil
}

// The forwarding RPC (stream "meta-rpc"): a follower sends a request
// frame, the leader answers a response frame; a connection may carry
// several in turn.
//
//	request:  uint32 length, big endian | entry (EncodeOps)
//	response: status byte | uint16 length | message
const (
	maxRequest = 16 << 20
	maxMessage = 1 << 10
)

// rpcStatus is the leader's answer to a forwarded entry.
type rpcStatus byte

const (
	rpcOK         rpcStatus = 0 // committed
	rpcNotLeader  rpcStatus = 1 // not (or no longer) the leader: retry
	rpcBadRequest rpcStatus = 2 // the entry does not decode
	rpcFailed     rpcStatus = 3 // Raft refused it for another reason
)

func appendRequest(b, entry []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(entry)))
	return append(b, entry...)
}

func appendResponse(b []byte, s rpcStatus, msg string) []byte {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	b = append(b, byte(s))
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

// Typed command entries (version 2). A version 1 entry is a batch of
// records; a version 2 entry is one typed command:
//
//	version 2 | uvarint kind | payload
//
// Each kind is gated by a feature flag (commandFlag): a node of a release
// that does not know the kind (v0.1.0 knows no version 2 entry at all)
// must not be a member when one is written. A node that meets a version
// or a kind it does not know stops applying (ErrUnreadable) rather than
// skipping the entry.
const commandVersion = 2

// Kind is a typed command's kind.
type Kind uint64

// Command kinds.
const (
	// KindEnableFlag enables a feature flag; payload: uvarint len | name.
	KindEnableFlag Kind = 1
	// KindTopology is a topology change; payload: an encoded
	// exchange.TopologyCommand (exchange.EncodeTopology, itself
	// versioned).
	KindTopology Kind = 2
	// KindUsers is a change of the user database (users, permissions,
	// topic permissions); payload: an encoded auth.Command (itself
	// versioned), opaque here: the group's TopologyApplier decodes it
	// (UsersApplier).
	KindUsers Kind = 3
	// KindParameters is a change of a parameter (a shovel's or an MQTT
	// bridge's definition); payload: an encoded shovel.Command (itself
	// versioned), opaque here (ParametersApplier decodes it).
	KindParameters Kind = 4
)

// commandFlag is the feature flag each kind needs enabled before a writer
// uses it. (KindEnableFlag of feature_flags itself is written once every
// member supports feature_flags: Group.EnableFeatureFlag.)
var commandFlag = map[Kind]string{
	KindEnableFlag: featureflags.FeatureFlags,
	KindTopology:   featureflags.TopologyCommands,
	KindUsers:      featureflags.TopologyCommands,
	KindParameters: featureflags.TopologyCommands,
}

// ErrUnreadable is an entry of a version or kind this node does not know:
// the cluster runs a newer release's format. The FSM stops applying.
var ErrUnreadable = errors.New("meta: entry of a newer format")

// Command is a decoded typed command entry.
type Command struct {
	Kind     Kind
	Flag     string                   // KindEnableFlag: the flag's name
	Topology exchange.TopologyCommand // KindTopology
	Users    []byte                   // KindUsers: the encoded command
	Params   []byte                   // KindParameters: the encoded command
}

// EncodeCommand encodes c as a version 2 entry.
func EncodeCommand(c Command) []byte {
	b := []byte{commandVersion}
	b = binary.AppendUvarint(b, uint64(c.Kind))
	switch c.Kind {
	case KindEnableFlag:
		b = appendBytes(b, []byte(c.Flag))
	case KindTopology:
		b = append(b, exchange.EncodeTopology(c.Topology)...)
	case KindUsers:
		b = append(b, c.Users...)
	case KindParameters:
		b = append(b, c.Params...)
	}
	return b
}

// DecodeEntry decodes a log entry of either version: ops for version 1,
// a command for version 2. A version or a kind this node does not know is
// ErrUnreadable.
func DecodeEntry(b []byte) ([]exchange.MetaOp, *Command, error) {
	if len(b) > 0 && b[0] == commandVersion {
		c, err := decodeCommand(b[1:])
		return nil, c, err
	}
	if len(b) > 0 && b[0] > commandVersion {
		return nil, nil, fmt.Errorf("%w: version %d", ErrUnreadable, b[0])
	}
	ops, err := DecodeOps(b)
	return ops, nil, err
}

func decodeCommand(b []byte) (*Command, error) {
	k, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: command kind", ErrBadEntry)
	}
	c := &Command{Kind: Kind(k)}
	b = b[n:]
	switch c.Kind {
	case KindEnableFlag:
		name, rest, ok := readBytes(b)
		if !ok || len(name) == 0 {
			return nil, fmt.Errorf("%w: flag name", ErrBadEntry)
		}
		c.Flag, b = string(name), rest
	case KindTopology:
		t, err := exchange.DecodeTopology(b)
		switch {
		case errors.Is(err, exchange.ErrTopologyUnreadable):
			return nil, fmt.Errorf("%w: %v", ErrUnreadable, err)
		case err != nil:
			return nil, fmt.Errorf("%w: %v", ErrBadEntry, err)
		}
		c.Topology, b = t, nil
	case KindUsers:
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: empty users command", ErrBadEntry)
		}
		c.Users, b = bytes.Clone(b), nil
	case KindParameters:
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: empty parameter command", ErrBadEntry)
		}
		c.Params, b = bytes.Clone(b), nil
	default:
		return nil, fmt.Errorf("%w: command kind %d", ErrUnreadable, k)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadEntry, len(b))
	}
	return c, nil
}
