package exchange

import (
	"sync"
	"testing"
)

// TestEncodingCache: the first encoding added under a key stays; others
// under it lose, keys of their own are kept apart; concurrent adders and
// readers agree (run with -race).
func TestEncodingCache(t *testing.T) {
	k1, k2 := NewEncodingKey("one"), NewEncodingKey("two")
	m := &Message{}
	if m.Encoding(k1) != nil {
		t.Fatal("empty message has an encoding")
	}
	if got := m.AddEncoding(&Encoding{Key: k1, Bytes: []byte("a")}); string(got) != "a" {
		t.Fatalf("AddEncoding = %q", got)
	}
	if got := m.AddEncoding(&Encoding{Key: k1, Bytes: []byte("b")}); string(got) != "a" {
		t.Fatalf("second AddEncoding = %q, want the first's", got)
	}
	if got := m.AddEncoding(&Encoding{Key: k2, Bytes: []byte("c")}); string(got) != "c" || string(m.Encoding(k1)) != "a" {
		t.Fatalf("k2 %q, k1 %q", got, m.Encoding(k1))
	}

	m = &Message{}
	keys := []*EncodingKey{k1, k2, NewEncodingKey("three")}
	got := make([][]byte, 12)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := keys[i%len(keys)]
			if b := m.Encoding(k); b != nil {
				got[i] = b
				return
			}
			got[i] = m.AddEncoding(&Encoding{Key: k, Bytes: []byte{byte(i)}})
		}()
	}
	wg.Wait()
	for i, b := range got {
		if want := m.Encoding(keys[i%len(keys)]); len(b) != 1 || &b[0] != &want[0] {
			t.Fatalf("goroutine %d got %v, the cache has %v", i, b, want)
		}
	}
}
