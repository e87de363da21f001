package store_test

import (
	"log/slog"
	"os"
	"testing"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
	"github.com/trident-broker/trident/store/storetest"
)

// testOptions keeps each test store small: tests open many of them.
func testOptions() store.BadgerOptions {
	return store.BadgerOptions{
		MemTableSize:   16 << 20,
		NumMemtables:   2,
		BlockCacheSize: 8 << 20,
		NumCompactors:  2,
	}
}

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func openBadgerErr(dir string) (*store.Badger, error) {
	return store.OpenBadger(dir, testOptions(), testLogger())
}

func openBadger(t testing.TB, dir string) *store.Badger {
	s, err := openBadgerErr(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBadger(t *testing.T) {
	storetest.Run(t, func(t *testing.T) exchange.Store { return openBadger(t, t.TempDir()) })
}

func TestBadgerDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, dir string) exchange.Store { return openBadger(t, dir) })
}

func BenchmarkBadger(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) exchange.Store { return openBadger(b, b.TempDir()) })
}
