package store_test

import (
	"testing"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

type metaGetter interface {
	exchange.Store
	GetMeta(key string) ([]byte, bool, error)
}

// TestGetMeta: GetMeta reads one record by its exact key (not a key it
// prefixes), sees a delete, and gives a copy.
func TestGetMeta(t *testing.T) {
	stores := map[string]func(t *testing.T) metaGetter{
		"badger": func(t *testing.T) metaGetter {
			s := openBadger(t, t.TempDir())
			t.Cleanup(func() { s.Close() })
			return s
		},
		"memory": func(*testing.T) metaGetter {
			return store.NewMemory()
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			if err := s.PutMeta("k/ab", []byte("long")); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := s.GetMeta("k/a"); err != nil || ok || v != nil {
				t.Fatalf("absent key: %q %v %v", v, ok, err)
			}
			if err := s.PutMeta("k/a", []byte("v")); err != nil {
				t.Fatal(err)
			}
			v, ok, err := s.GetMeta("k/a")
			if err != nil || !ok || string(v) != "v" {
				t.Fatalf("k/a: %q %v %v", v, ok, err)
			}
			v[0] = 'x'
			if v, _, _ := s.GetMeta("k/a"); string(v) != "v" {
				t.Fatalf("GetMeta gave the store's own bytes: now %q", v)
			}
			if err := s.DeleteMeta("k/a"); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := s.GetMeta("k/a"); err != nil || ok {
				t.Fatalf("deleted key: %v %v", ok, err)
			}
		})
	}
}
