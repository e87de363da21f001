package store_test

import (
	"testing"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

type metaBatchStore interface {
	exchange.Store
	exchange.MetaBatcher
}

var (
	_ metaBatchStore = (*store.Badger)(nil)
	_ metaBatchStore = (*store.Memory)(nil)
)

// TestWriteMetaBatch: one batch puts and deletes records together, in
// order (a put then a delete of a key leaves it deleted), and a Badger
// store has them after a reopen.
func TestWriteMetaBatch(t *testing.T) {
	dir := t.TempDir()
	for name, s := range map[string]metaBatchStore{"badger": openBadger(t, dir), "memory": store.NewMemory()} {
		t.Run(name, func(t *testing.T) {
			if err := s.PutMeta("a", []byte("old")); err != nil {
				t.Fatal(err)
			}
			err := s.WriteMetaBatch([]string{"a", "b", "c", "c"}, [][]byte{nil, []byte("vb"), []byte("vc"), nil})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.WriteMetaBatch([]string{"x"}, nil); err == nil {
				t.Fatal("keys without values: no error")
			}
			if name == "badger" {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = openBadger(t, dir)
				defer s.Close()
			}
			got := map[string]string{}
			if err := s.LoadMeta("", func(k string, v []byte) error { got[k] = string(v); return nil }); err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got["b"] != "vb" {
				t.Fatalf("records %q, want only b=vb", got)
			}
		})
	}
}
