package mqtt

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// synthStore is a MetaStore that holds n retained records of vhost "/"
// (topics dev/<i/100>/<i%100>/t, 64-byte payloads) without keeping them
// in memory, as a node's store on disk holds them: each is made when it
// is read. Other records are kept in a map.
type synthStore struct {
	n          int
	head, tail []byte // a record is head + topic + tail

	mu    sync.Mutex
	other map[string][]byte
}

func newSynthStore(tb testing.TB, n int) *synthStore {
	rec, err := json.Marshal(&retainedMsg{Topic: "\x00", Payload: make([]byte, 64), QoS: 1,
		Props: packets.Properties{ContentType: "text/plain"}})
	if err != nil {
		tb.Fatal(err)
	}
	head, tail, ok := bytes.Cut(rec, []byte(`\u0000`))
	if !ok {
		tb.Fatalf("record %s", rec)
	}
	return &synthStore{n: n, head: head, tail: tail, other: map[string][]byte{}}
}

func synthTopic(i int) string { return fmt.Sprintf("dev/%d/%d/t", i/100, i%100) }

func (s *synthStore) record(topic string) []byte {
	return append(append(append(make([]byte, 0, len(s.head)+len(topic)+len(s.tail)), s.head...), topic...), s.tail...)
}

func (s *synthStore) PutMeta(key string, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.other[key] = bytes.Clone(val)
	return nil
}

func (s *synthStore) DeleteMeta(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.other, key)
	return nil
}

func (s *synthStore) GetMeta(key string) ([]byte, bool, error) {
	if topic, ok := strings.CutPrefix(key, retainedKey("/", "")); ok && strings.HasPrefix(topic, "dev/") {
		return s.record(topic), true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.other[key]
	return v, ok, nil
}

func (s *synthStore) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	if strings.HasPrefix(retainedPrefix, prefix) || strings.HasPrefix(prefix, retainedPrefix) {
		for i := range s.n {
			topic := synthTopic(i)
			if key := retainedKey("/", topic); strings.HasPrefix(key, prefix) {
				if err := fn(key, s.record(topic)); err != nil {
					return err
				}
			}
		}
	}
	s.mu.Lock()
	other := map[string][]byte{}
	for k, v := range s.other {
		if strings.HasPrefix(k, prefix) {
			other[k] = v
		}
	}
	s.mu.Unlock()
	for k, v := range other {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

const benchRetained = 1_000_000

// BenchmarkRetainedMatch is the retained part of a SUBSCRIBE whose filter
// matches 100 of 1,000,000 retained messages: find them and read them.
// heapB/retained is the heap the retained messages take (the store's
// copy aside).
func BenchmarkRetainedMatch(b *testing.B) {
	st := newSynthStore(b, benchRetained)
	before := heapInUse()
	r, err := loadRetained(st)
	if err != nil {
		b.Fatal(err)
	}
	heap := float64(heapInUse()-before) / benchRetained
	b.ReportAllocs()
	b.ResetTimer()
	defer func() { b.ReportMetric(heap, "heapB/retained") }()
	for i := 0; i < b.N; i++ {
		if got := r.match("/", fmt.Sprintf("dev/%d/+/t", i%(benchRetained/100))); len(got) != 100 {
			b.Fatalf("%d matched", len(got))
		}
	}
}

// BenchmarkRetainedSubscribe is a SUBSCRIBE over the wire whose filter
// matches 100 of 1,000,000 retained messages, then its UNSUBSCRIBE: an
// operation is the round trip; ms-after-SUBACK is the mean time from
// the SUBACK to the 100th retained PUBLISH, max-ms-after-SUBACK the
// most, ops-over-10ms how many took longer than 10 ms.
func BenchmarkRetainedSubscribe(b *testing.B) {
	s, addr := testServerWith(b, newSynthStore(b, benchRetained))
	if n := s.retained.count(); n != benchRetained {
		b.Fatalf("%d retained", n)
	}
	nc := benchMQTTDial(b, addr, "bench-retained", 4, "")
	br := bufio.NewReader(nc)
	read := func() byte {
		first, err := br.ReadByte()
		if err != nil {
			b.Fatal(err)
		}
		n, mul := 0, 1
		for {
			d, err := br.ReadByte()
			if err != nil {
				b.Fatal(err)
			}
			n += int(d&0x7f) * mul
			mul *= 128
			if d&0x80 == 0 {
				break
			}
		}
		if _, err := br.Discard(n); err != nil {
			b.Fatal(err)
		}
		return first >> 4
	}
	var body []byte
	var total, most time.Duration
	over := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		filter := fmt.Sprintf("dev/%d/+/t", i%(benchRetained/100))
		body = binary.BigEndian.AppendUint16(body[:0], 1)
		body = append(benchString(body, filter), 0) // QoS 0
		if _, err := nc.Write(benchPacket(nil, 0x82, body)); err != nil {
			b.Fatal(err)
		}
		if typ := read(); typ != packets.Suback {
			b.Fatalf("packet %d, want SUBACK", typ)
		}
		t0 := time.Now()
		for range 100 {
			if typ := read(); typ != packets.Publish {
				b.Fatalf("packet %d, want PUBLISH", typ)
			}
		}
		d := time.Since(t0)
		total, most = total+d, max(most, d)
		if d > 10*time.Millisecond {
			over++
		}
		body = binary.BigEndian.AppendUint16(body[:0], 2)
		body = benchString(body, filter)
		if _, err := nc.Write(benchPacket(nil, 0xA2, body)); err != nil {
			b.Fatal(err)
		}
		if typ := read(); typ != packets.Unsuback {
			b.Fatalf("packet %d, want UNSUBACK", typ)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-after-SUBACK")
	b.ReportMetric(float64(most.Microseconds())/1000, "max-ms-after-SUBACK")
	b.ReportMetric(float64(over), "ops-over-10ms")
}
