package store_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/trident-broker/trident/store"
)

// crashRangeEnv names the directory of TestCrashRangeDelete's child.
const crashRangeEnv = "TRIDENT_STORE_CRASH_RANGE_DIR"

// TestCrashRangeDelete: a child appends a stream's offsets and, every
// 1000, writes the last stretch below the cut again with PutMessage (as a
// replicated log applied again after a crash does) and range-deletes
// everything below the cut; it prints "ok seq cut" for each append's
// done(nil), cut being the last range issued before that append. After a
// SIGKILL no key below the highest such cut is left (a range delete issued
// before a durable append is durable, puts of stored messages included)
// and every acknowledged offset above it is there. The second round deletes
// its ranges a few keys a batch (tombstones, rangedel.go).
func TestCrashRangeDelete(t *testing.T) {
	if dir := os.Getenv(crashRangeEnv); dir != "" {
		crashRangeChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("crash test re-executes the test binary")
	}
	dir := t.TempDir()
	for round := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashRangeDelete$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashRangeEnv+"="+dir, fmt.Sprintf("TRIDENT_STORE_CRASH_ROUND=%d", round))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := map[uint64]bool{}
		var maxCut, maxIssued uint64 // the highest cut acknowledged, issued
		r := bufio.NewReader(out)
		killed := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				break // a line cut by the kill has no newline: not an ack
			}
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == "cut" {
				c, _ := strconv.ParseUint(f[1], 10, 64)
				maxIssued = max(maxIssued, c)
				continue
			}
			if len(f) != 3 || f[0] != "ok" {
				continue
			}
			seq, _ := strconv.ParseUint(f[1], 10, 64)
			cut, _ := strconv.ParseUint(f[2], 10, 64)
			acked[seq] = true
			maxCut = max(maxCut, cut)
			if len(acked) == 12000+round*3001 && !killed {
				killed = true
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		err = cmd.Wait()
		if !killed {
			t.Fatalf("round %d: child exited before the kill (%v) after %d acks", round, err, len(acked))
		}
		if maxCut == 0 {
			t.Fatalf("round %d: no range delete acknowledged before the kill", round)
		}
		s := openBadger(t, dir)
		var below []uint64
		if err := s.LoadMessages(1, func(seq uint64, data []byte) error {
			if string(data) != string(crashData(1, seq)) {
				return fmt.Errorf("seq %d: corrupt data %x", seq, data)
			}
			if seq < maxCut {
				below = append(below, seq)
			}
			delete(acked, seq)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(below) > 0 {
			t.Fatalf("round %d: %d keys below the range delete at %d survived the kill, first %d", round, len(below), maxCut, below[0])
		}
		// Acknowledged offsets between the last acknowledged cut and the
		// last issued one may be gone (that delete may have become
		// durable before the kill); every one above the issued cut stays.
		lost := 0
		for seq := range acked {
			if seq >= max(maxCut, maxIssued) {
				lost++
			}
		}
		if lost > 0 {
			t.Fatalf("round %d: %d acknowledged offsets at or above %d lost", round, lost, max(maxCut, maxIssued))
		}
		t.Logf("round %d: nothing below %d, every acknowledged offset above it there", round, maxCut)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// crashRangeChild appends offsets of queue 1 until killed.
func crashRangeChild(dir string) {
	s, err := openBadgerErr(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	round, _ := strconv.ParseUint(os.Getenv("TRIDENT_STORE_CRASH_ROUND"), 10, 64)
	if round == 1 {
		// Round 1 deletes its ranges 64 keys a batch: the kill lands
		// while one is under way, its tombstone holding the rest.
		store.SetRangeChunk(64)
	}
	lines := make(chan [2]uint64, 4096)
	var outMu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	go func() {
		for l := range lines {
			outMu.Lock()
			fmt.Fprintf(w, "ok %d %d\n", l[0], l[1])
			if len(lines) == 0 {
				w.Flush()
			}
			outMu.Unlock()
		}
	}()
	sem := make(chan struct{}, 256)
	var cut uint64
	base := round * 1_000_000 // each round goes on past the last
	for i := uint64(0); ; i++ {
		seq := base + i
		if i%1000 == 0 && i > 0 {
			for k := seq - 300; k < seq-200; k++ {
				s.PutMessage(1, k, crashData(1, k), nil)
			}
			cut = seq - 200
			// "cut N" is in the pipe before the delete is issued: a
			// delete that became durable just before the kill, with no
			// append after it acknowledged yet, is known to the parent.
			outMu.Lock()
			fmt.Fprintf(w, "cut %d\n", cut)
			w.Flush()
			outMu.Unlock()
			s.DeleteMessages(1, 0, cut)
		}
		sem <- struct{}{}
		c := cut
		s.AppendMessage(1, seq, crashData(1, seq), func(err error) {
			if err == nil {
				lines <- [2]uint64{seq, c}
			}
			<-sem
		})
	}
}
