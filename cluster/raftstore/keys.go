package raftstore

import "encoding/binary"

// Key layout, all under one DB:
//
//	'g' uvarint(len(group)) group 'L' index(8, big endian)  → encoded raft.Log
//	'g' uvarint(len(group)) group 'S' key                   → stable value
//
// The length prefix makes no group's prefix a prefix of another's, and the
// big-endian index makes key order log order.
const (
	kindLog    = 'L'
	kindStable = 'S'
)

func groupPrefix(group string) []byte {
	p := make([]byte, 0, 1+binary.MaxVarintLen64+len(group))
	p = append(p, 'g')
	p = binary.AppendUvarint(p, uint64(len(group)))
	return append(p, group...)
}

type keyspace struct {
	group  []byte // groupPrefix
	log    []byte // group + 'L'
	stable []byte // group + 'S'
}

func newKeyspace(group string) keyspace {
	g := groupPrefix(group)
	return keyspace{
		group:  g,
		log:    append(append([]byte(nil), g...), kindLog),
		stable: append(append([]byte(nil), g...), kindStable),
	}
}

func (k keyspace) logKey(index uint64) []byte {
	b := make([]byte, len(k.log)+8)
	copy(b, k.log)
	binary.BigEndian.PutUint64(b[len(k.log):], index)
	return b
}

// logIndex returns the index of a log key of this keyspace.
func (k keyspace) logIndex(key []byte) (uint64, bool) {
	if len(key) != len(k.log)+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(key[len(k.log):]), true
}

func (k keyspace) stableKey(key []byte) []byte {
	b := make([]byte, 0, len(k.stable)+len(key))
	return append(append(b, k.stable...), key...)
}
