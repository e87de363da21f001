package store

import "encoding/binary"

// Key layout in Badger:
//
//	"m:" + key                          metadata record
//	'q' + qid (8 bytes BE) + seq (8 BE)  message seq of queue qid
//
// Big-endian integers make a prefix scan of 'q'+qid return a queue's
// messages in seq order.
const (
	metaPrefix = "m:"
	msgTag     = 'q'
	msgKeyLen  = 17
)

func appendMsgKey(dst []byte, qid, seq uint64) []byte {
	dst = append(dst, msgTag)
	dst = binary.BigEndian.AppendUint64(dst, qid)
	return binary.BigEndian.AppendUint64(dst, seq)
}

func msgQueuePrefix(qid uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{msgTag}, qid)
}

func msgKeySeq(key []byte) uint64 {
	return binary.BigEndian.Uint64(key[9:17])
}
