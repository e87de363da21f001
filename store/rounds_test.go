package store

import (
	"sync"
	"testing"
)

// Every done callback runs inside a round the OnRounds hook was told of,
// on the notifier: the core reads its clock once per round for the
// confirms' latency.
func TestOnRoundsBracketsCallbacks(t *testing.T) {
	s, err := OpenBadger(t.TempDir(), BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var (
		mu      sync.Mutex
		in      bool
		rounds  int
		outside int
	)
	s.OnRounds(func(begin bool) {
		mu.Lock()
		defer mu.Unlock()
		if begin == in {
			t.Errorf("round hook told %v twice", begin)
		}
		in = begin
		if begin {
			rounds++
		}
	})
	const n = 500
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		s.AppendMessage(7, uint64(i+1), []byte("body"), func(err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			if !in {
				outside++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if outside != 0 || rounds == 0 {
		t.Fatalf("%d of %d callbacks ran outside a round (%d rounds)", outside, n, rounds)
	}
}
