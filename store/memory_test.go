package store_test

import (
	"testing"

	"github.com/trident-broker/trident/store"
	"github.com/trident-broker/trident/store/storetest"
)

func TestMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return store.NewMemory() })
}

func BenchmarkMemory(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return store.NewMemory() })
}
