package store

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

func engineOptions(dir string) EngineOptions {
	return EngineOptions{Name: "test", Badger: badger.DefaultOptions(dir).WithMemTableSize(4 << 20).WithValueThreshold(1 << 10).
		WithValueLogFileSize(1 << 20), GCInterval: -1, TrimInterval: -1, GCDiscardRatio: 0.5}
}

// TestEngineLifecycle: the directory is locked while open, an AfterOpen
// failure closes Badger and releases the lock, the GC policy runs every
// interval and not after Close, and Close releases the lock.
func TestEngineLifecycle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	boom := errors.New("boom")
	o := engineOptions(dir)
	o.AfterOpen = func(*badger.DB) error { return boom }
	if _, err := OpenEngine(o, nil); !errors.Is(err, boom) {
		t.Fatalf("AfterOpen's error: got %v", err)
	}

	var runs atomic.Int64
	o = engineOptions(dir)
	o.GCInterval = 10 * time.Millisecond
	o.BeforeGC = func() { runs.Add(1) }
	e, err := OpenEngine(o, nil)
	if err != nil {
		t.Fatalf("open after a failed open: %v", err)
	}
	if _, err := OpenEngine(engineOptions(dir), nil); !errors.Is(err, ErrStoreInUse) {
		t.Fatalf("second open of one directory: %v, want ErrStoreInUse", err)
	}
	for deadline := time.Now().Add(30 * time.Second); runs.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the GC policy did not run")
		}
	}
	if err := e.DB.Update(func(txn *badger.Txn) error { return txn.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := e.Reclaim(nil); err != nil {
		t.Fatalf("reclaim: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	after := runs.Load()
	time.Sleep(50 * time.Millisecond)
	if runs.Load() != after {
		t.Fatal("the GC policy ran after Close")
	}
	e, err = OpenEngine(engineOptions(dir), nil)
	if err != nil {
		t.Fatalf("open after Close: %v", err)
	}
	defer e.Close()
	err = e.DB.View(func(txn *badger.Txn) error {
		_, err := txn.Get([]byte("k"))
		return err
	})
	if err != nil {
		t.Fatalf("what was written before Close: %v", err)
	}
	if _, err := OpenEngine(EngineOptions{Name: "test", Badger: badger.DefaultOptions(dir + "2"), EncryptionKey: []byte("short")}, nil); !errors.Is(err, ErrBadKeyFile) {
		t.Fatalf("bad key: %v", err)
	}
}
