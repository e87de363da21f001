package store_test

import (
	"testing"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
	"github.com/trident-broker/trident/store/storetest"
)

// Both engines implement the core's Store, its one definition.
var (
	_ exchange.Store = (*store.Memory)(nil)
	_ exchange.Store = (*store.Badger)(nil)
)

func TestMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) exchange.Store { return store.NewMemory() })
}

func BenchmarkMemory(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) exchange.Store { return store.NewMemory() })
}
