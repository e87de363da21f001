package exchange

import "sync/atomic"

// EncodingKey names one wire encoding of a message, chosen by the front end
// that writes it (for MQTT: protocol version, QoS and retain flag). Keys
// compare by identity: each front end makes its own with NewEncodingKey, so
// two front ends' keys never collide.
type EncodingKey struct{ name string }

// NewEncodingKey returns a new key; name is for debugging only.
func NewEncodingKey(name string) *EncodingKey { return &EncodingKey{name: name} }

// String returns the key's name.
func (k *EncodingKey) String() string { return k.name }

// Encoding is a front end's encoding of a message (its whole outbound frame
// or packet, say), cached on the message so that the deliveries of one
// publish to many queues, which all carry the same *Message, encode it once
// and write the same bytes. Key says which encoding it is and Bytes are
// never modified once the Encoding is added to a message.
type Encoding struct {
	Key   *EncodingKey
	Bytes []byte
	next  *Encoding
}

// Encoding returns the bytes cached for k, or nil. It is safe for
// concurrent use (many connection writers deliver the same message).
func (m *Message) Encoding(k *EncodingKey) []byte { return m.enc.get(k) }

// AddEncoding caches e on m and returns e.Bytes, or, if an encoding with
// e's key is there already (another writer won the race), that one's bytes;
// e is not retained then. e must not be added to another message. It is
// safe for concurrent use; the cache lives as long as the message and is
// not carried to the copies the core makes (dead letters, delayed
// messages), whose properties may differ.
func (m *Message) AddEncoding(e *Encoding) []byte { return m.enc.add(e) }

// encodings is a list of encodings that only grows (Message's, and a
// shared stream record's).
type encodings struct{ head atomic.Pointer[Encoding] }

func (l *encodings) get(k *EncodingKey) []byte {
	for e := l.head.Load(); e != nil; e = e.next {
		if e.Key == k {
			return e.Bytes
		}
	}
	return nil
}

func (l *encodings) add(e *Encoding) []byte {
	for {
		head := l.head.Load()
		for o := head; o != nil; o = o.next {
			if o.Key == e.Key {
				return o.Bytes
			}
		}
		e.next = head
		if l.head.CompareAndSwap(head, e) {
			return e.Bytes
		}
	}
}
