package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// openTest opens a DB in a temp dir, closed at the end of the test.
func openTest(t testing.TB) (*DB, string) {
	t.Helper()
	dir := t.TempDir()
	d, err := Open(dir, Options{GCInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, dir
}

func mkLog(idx uint64, data string) *raft.Log {
	return &raft.Log{Index: idx, Term: idx/10 + 1, Type: raft.LogCommand, Data: []byte(data)}
}

func mkLogs(from, to uint64) []*raft.Log {
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, mkLog(i, fmt.Sprintf("log-%d", i)))
	}
	return ls
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) &&
		a.AppendedAt.Equal(b.AppendedAt)
}

func indexes(t *testing.T, s *Store) (first, last uint64) {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err = s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return first, last
}

// TestLogStoreContract is the LogStore contract hashicorp/raft relies on
// (the cases raft-boltdb tests its store with, plus gaps and groups).
func TestLogStoreContract(t *testing.T) {
	cases := []struct {
		name        string
		setup       func(t *testing.T, s *Store)
		first, last uint64
		present     []uint64
		missing     []uint64
	}{
		{
			name:    "empty",
			setup:   func(*testing.T, *Store) {},
			missing: []uint64{0, 1, 2},
		},
		{
			name: "store log",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLog(mkLog(1, "one")); err != nil {
					t.Fatal(err)
				}
			},
			first: 1, last: 1, present: []uint64{1}, missing: []uint64{0, 2},
		},
		{
			name: "store logs",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(mkLogs(1, 10)); err != nil {
					t.Fatal(err)
				}
			},
			first: 1, last: 10, present: []uint64{1, 5, 10}, missing: []uint64{0, 11},
		},
		{
			name: "store logs not starting at 1",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(mkLogs(100, 120)); err != nil {
					t.Fatal(err)
				}
			},
			first: 100, last: 120, present: []uint64{100, 120}, missing: []uint64{1, 99, 121},
		},
		{
			name: "gap between batches",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(mkLogs(1, 3)); err != nil {
					t.Fatal(err)
				}
				if err := s.StoreLogs(mkLogs(10, 12)); err != nil {
					t.Fatal(err)
				}
			},
			first: 1, last: 12, present: []uint64{3, 10}, missing: []uint64{4, 9},
		},
		{
			name: "delete range head",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(mkLogs(1, 10)); err != nil {
					t.Fatal(err)
				}
				if err := s.DeleteRange(1, 4); err != nil {
					t.Fatal(err)
				}
			},
			first: 5, last: 10, present: []uint64{5, 10}, missing: []uint64{1, 4},
		},
		{
			name: "delete range tail (conflict truncation)",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(mkLogs(1, 10)); err != nil {
					t.Fatal(err)
				}
				if err := s.DeleteRange(7, 10); err != nil {
					t.Fatal(err)
				}
			},
			first: 1, last: 6, present: []uint64{1, 6}, missing: []uint64{7, 10},
		},
		{
			name: "delete range everything",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(mkLogs(1, 10)); err != nil {
					t.Fatal(err)
				}
				if err := s.DeleteRange(1, 10); err != nil {
					t.Fatal(err)
				}
			},
			missing: []uint64{1, 10},
		},
		{
			name: "delete range beyond both ends",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(mkLogs(5, 10)); err != nil {
					t.Fatal(err)
				}
				if err := s.DeleteRange(0, 1<<63); err != nil {
					t.Fatal(err)
				}
			},
			missing: []uint64{5, 10},
		},
		{
			name: "delete empty range is a no-op",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(mkLogs(1, 3)); err != nil {
					t.Fatal(err)
				}
				if err := s.DeleteRange(3, 2); err != nil {
					t.Fatal(err)
				}
			},
			first: 1, last: 3, present: []uint64{1, 2, 3},
		},
		{
			name: "overwrite after truncation",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(mkLogs(1, 5)); err != nil {
					t.Fatal(err)
				}
				if err := s.DeleteRange(4, 5); err != nil {
					t.Fatal(err)
				}
				if err := s.StoreLogs(mkLogs(4, 8)); err != nil {
					t.Fatal(err)
				}
			},
			first: 1, last: 8, present: []uint64{1, 4, 8}, missing: []uint64{9},
		},
		{
			name: "empty batch",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLogs(nil); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "max index",
			setup: func(t *testing.T, s *Store) {
				if err := s.StoreLog(mkLog(1<<64-1, "max")); err != nil {
					t.Fatal(err)
				}
			},
			first: 1<<64 - 1, last: 1<<64 - 1, present: []uint64{1<<64 - 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := openTest(t)
			s := d.Group("g")
			tc.setup(t, s)
			first, last := indexes(t, s)
			if first != tc.first || last != tc.last {
				t.Fatalf("first, last = %d, %d; want %d, %d", first, last, tc.first, tc.last)
			}
			for _, i := range tc.present {
				var l raft.Log
				if err := s.GetLog(i, &l); err != nil {
					t.Fatalf("GetLog(%d): %v", i, err)
				}
				if l.Index != i {
					t.Fatalf("GetLog(%d) index %d", i, l.Index)
				}
			}
			for _, i := range tc.missing {
				var l raft.Log
				if err := s.GetLog(i, &l); !errors.Is(err, raft.ErrLogNotFound) {
					t.Fatalf("GetLog(%d) = %v, want raft.ErrLogNotFound", i, err)
				}
			}
		})
	}
}

func TestGetLogRoundTrip(t *testing.T) {
	d, _ := openTest(t)
	s := d.Group("g")
	in := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("cfg")},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("cmd"), Extensions: []byte("ext"),
			AppendedAt: time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)},
		{Index: 3, Term: 2, Type: raft.LogNoop},
		{Index: 4, Term: 2, Type: raft.LogBarrier, Data: bytes.Repeat([]byte{0xAB}, 2<<20)}, // > value threshold
	}
	if err := s.StoreLogs(in); err != nil {
		t.Fatal(err)
	}
	for _, want := range in {
		var got raft.Log
		if err := s.GetLog(want.Index, &got); err != nil {
			t.Fatal(err)
		}
		if !sameLog(&got, want) {
			t.Fatalf("index %d: got %+v, want %+v", want.Index, got, want)
		}
	}
}

// TestStableStoreContract: raft reads a missing key as "not found" (by the
// error's text) for Get and GetUint64 alike.
func TestStableStoreContract(t *testing.T) {
	d, _ := openTest(t)
	s := d.Group("g")

	if v, err := s.Get([]byte("missing")); err == nil || err.Error() != "not found" || v != nil {
		t.Fatalf("Get(missing) = %q, %v; want nil, \"not found\"", v, err)
	}
	if v, err := s.GetUint64([]byte("missing")); err == nil || err.Error() != "not found" || v != 0 {
		t.Fatalf("GetUint64(missing) = %d, %v; want 0, \"not found\"", v, err)
	}
	if !errors.Is(func() error { _, err := s.Get([]byte("x")); return err }(), ErrKeyNotFound) {
		t.Fatal("missing key is not ErrKeyNotFound")
	}

	cases := []struct{ key, val string }{
		{"hello", "world"},
		{"LastVoteCand", "node-1"},
		{"empty", ""},
		{"binary\x00key", "\x00\xff"},
	}
	for _, c := range cases {
		if err := s.Set([]byte(c.key), []byte(c.val)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		v, err := s.Get([]byte(c.key))
		if err != nil || string(v) != c.val || v == nil {
			t.Fatalf("Get(%q) = %q, %v; want %q", c.key, v, err, c.val)
		}
	}
	// overwrite
	if err := s.Set([]byte("hello"), []byte("again")); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Get([]byte("hello")); string(v) != "again" {
		t.Fatalf("after overwrite Get = %q", v)
	}

	for _, n := range []uint64{0, 1, 42, 1<<64 - 1} {
		if err := s.SetUint64([]byte("CurrentTerm"), n); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetUint64([]byte("CurrentTerm"))
		if err != nil || got != n {
			t.Fatalf("GetUint64 = %d, %v; want %d", got, err, n)
		}
	}
	// A caller's slice may be reused after Set.
	buf := []byte("v1")
	if err := s.Set([]byte("k"), buf); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	if v, _ := s.Get([]byte("k")); string(v) != "v1" {
		t.Fatalf("Set kept the caller's slice: %q", v)
	}
}

// TestGroupsAreSeparate: groups whose names are prefixes of each other do
// not see each other's logs or keys, and DropGroup removes one only.
func TestGroupsAreSeparate(t *testing.T) {
	d, _ := openTest(t)
	a, ab := d.Group("q"), d.Group("q1")
	if err := a.StoreLogs(mkLogs(1, 5)); err != nil {
		t.Fatal(err)
	}
	if err := ab.StoreLogs(mkLogs(3, 9)); err != nil {
		t.Fatal(err)
	}
	if err := a.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if f, l := indexes(t, a); f != 1 || l != 5 {
		t.Fatalf("q: %d..%d", f, l)
	}
	if f, l := indexes(t, ab); f != 3 || l != 9 {
		t.Fatalf("q1: %d..%d", f, l)
	}
	if _, err := ab.GetUint64([]byte("CurrentTerm")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("q1 sees q's key: %v", err)
	}
	if err := d.DropGroup("q"); err != nil {
		t.Fatal(err)
	}
	if f, l := indexes(t, a); f != 0 || l != 0 {
		t.Fatalf("dropped q: %d..%d", f, l)
	}
	if _, err := a.GetUint64([]byte("CurrentTerm")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("dropped q keeps its key: %v", err)
	}
	if f, l := indexes(t, ab); f != 3 || l != 9 {
		t.Fatalf("q1 after drop of q: %d..%d", f, l)
	}
}

// TestReopen: what StoreLogs and Set returned for is there after a reopen.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := d.Group("meta")
	if err := s.StoreLogs(mkLogs(1, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 50); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LastIndex(); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
	d, err = Open(dir, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s = d.Group("meta")
	if f, l := indexes(t, s); f != 51 || l != 100 {
		t.Fatalf("after reopen: %d..%d", f, l)
	}
	if n, err := s.GetUint64([]byte("CurrentTerm")); err != nil || n != 3 {
		t.Fatalf("term after reopen = %d, %v", n, err)
	}
}

// TestConcurrentGroups writes from many groups at once (as quorum queues
// will) under -race.
func TestConcurrentGroups(t *testing.T) {
	d, _ := openTest(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := d.Group(fmt.Sprintf("q%d", g))
			for i := uint64(1); i <= 200; i += 10 {
				if err := s.StoreLogs(mkLogs(i, i+9)); err != nil {
					t.Error(err)
					return
				}
			}
			if err := s.DeleteRange(1, 100); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for g := range 8 {
		if f, l := indexes(t, d.Group(fmt.Sprintf("q%d", g))); f != 101 || l != 200 {
			t.Fatalf("q%d: %d..%d", g, f, l)
		}
	}
}
