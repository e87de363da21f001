package store_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// crashEnv names the directory a re-executed test binary appends into.
const crashEnv = "TRIDENT_STORE_CRASH_DIR"

const crashQueues = 4

func crashData(qid, seq uint64) []byte {
	b := binary.BigEndian.AppendUint64(nil, qid)
	return binary.BigEndian.AppendUint64(b, seq^0xa5a5a5a5)
}

// TestCrashRecovery re-executes the test binary as a child that appends
// messages from several goroutines and prints "ok qid seq" after each
// done(nil). The parent SIGKILLs it mid-way, reopens the store and checks
// that every printed message is there, intact.
func TestCrashRecovery(t *testing.T) { crashTest(t, "TestCrashRecovery", false) }

// TestCrashRecoveryAcked is TestCrashRecovery with most messages deleted
// right after their append, as by consumers that keep up: the writer then
// lets batches age, cancels appends at their delete and hands their
// callbacks over before any write. Every acknowledged message not deleted
// must survive the kills; the others may or may not.
func TestCrashRecoveryAcked(t *testing.T) { crashTest(t, "TestCrashRecoveryAcked", true) }

// crashKept reports whether the child keeps message seq (deletes none of
// it): with acked, one in five; else all but one in five.
func crashKept(seq uint64, acked bool) bool {
	i := seq & (1<<40 - 1)
	if acked {
		return i%5 == 0
	}
	return i%5 != 4
}

func crashTest(t *testing.T, name string, ackedMode bool) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir, ackedMode)
		return
	}
	if testing.Short() {
		t.Skip("crash test re-executes the test binary")
	}
	dir := t.TempDir()
	for round := range 3 { // kill, reopen, append more, kill again
		cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir, fmt.Sprintf("TRIDENT_STORE_CRASH_ROUND=%d", round))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := make(map[[2]uint64]bool)
		r := bufio.NewReader(out)
		killAt := 16000 + round*7919
		if ackedMode {
			killAt /= 4 // a fifth of the messages are kept
		}
		killed := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				// EOF. A last line without its newline was cut by the
				// kill in the middle of a write: it is not an ack.
				break
			}
			f := strings.Fields(line)
			if len(f) != 3 || f[0] != "ok" {
				continue
			}
			qid, _ := strconv.ParseUint(f[1], 10, 64)
			seq, _ := strconv.ParseUint(f[2], 10, 64)
			if crashKept(seq, ackedMode) {
				acked[[2]uint64{qid, seq}] = true
			}
			if len(acked) == killAt && !killed {
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
		s := openBadger(t, dir)
		found := 0
		for qid := range uint64(crashQueues) {
			if err := s.LoadMessages(qid, func(seq uint64, data []byte) error {
				if string(data) != string(crashData(qid, seq)) {
					return fmt.Errorf("queue %d seq %d: corrupt data %x", qid, seq, data)
				}
				if acked[[2]uint64{qid, seq}] {
					delete(acked, [2]uint64{qid, seq})
					found++
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if len(acked) > 0 {
			t.Fatalf("round %d: %d acknowledged messages lost after SIGKILL (found %d)", round, len(acked), found)
		}
		t.Logf("round %d: all %d acknowledged messages recovered", round, found)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// crashChild appends until killed, printing each acknowledged message.
func crashChild(dir string, ackedMode bool) {
	s, err := openBadgerErr(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	round, _ := strconv.ParseUint(os.Getenv("TRIDENT_STORE_CRASH_ROUND"), 10, 64)
	lines := make(chan [2]uint64, 4096)
	go func() {
		w := bufio.NewWriter(os.Stdout)
		for l := range lines {
			fmt.Fprintf(w, "ok %d %d\n", l[0], l[1])
			if len(lines) == 0 {
				w.Flush()
			}
		}
	}()
	var wg sync.WaitGroup
	for qid := range uint64(crashQueues) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, 128)
			for i := uint64(0); ; i++ {
				seq := round<<40 | i
				sem <- struct{}{}
				s.AppendMessage(qid, seq, crashData(qid, seq), func(err error) {
					if err == nil {
						lines <- [2]uint64{qid, seq}
					}
					<-sem
				})
				if prev := round<<40 | (i - 1); i > 0 && !crashKept(prev, ackedMode) {
					// acked consumers: deletes interleave with appends
					s.DeleteMessage(qid, prev) // may or may not be durable
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Hour)
}
