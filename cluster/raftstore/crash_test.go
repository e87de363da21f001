package raftstore

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

const crashHelperEnv = "TRIDENT_RAFTSTORE_CRASH_DIR"

// TestCrashKeepsStoredLogs: a process appending batches is killed with
// SIGKILL mid-stream; after reopening, every entry whose StoreLogs had
// returned is there, with no gap below the last one. (SIGKILL keeps the
// page cache, so this checks recovery and ordering; fsync on return is
// Badger's SyncWrites.)
func TestCrashKeepsStoredLogs(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "" {
		t.Skip("inside the helper")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked uint64
	sc := bufio.NewScanner(out)
	timer := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "stored "); ok {
			acked, _ = strconv.ParseUint(v, 10, 64)
			if acked >= 2000 {
				cmd.Process.Kill()
				break
			}
		}
	}
	cmd.Wait()
	if acked == 0 {
		t.Fatal("helper stored nothing")
	}
	d, err := Open(dir, Options{GCInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s := d.Group("crash")
	first, last := indexes(t, s)
	if first != 1 || last < acked {
		t.Fatalf("after kill: log %d..%d, but %d entries were acknowledged", first, last, acked)
	}
	for i := uint64(1); i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d of %d..%d: %v", i, first, last, err)
		}
		if want := fmt.Sprintf("log-%d", i); string(l.Data) != want {
			t.Fatalf("entry %d holds %q", i, l.Data)
		}
	}
	t.Logf("killed after %d acknowledged entries; %d recovered", acked, last)
}

// TestCrashHelperProcess appends batches of 7 entries and prints the last
// index after each StoreLogs returns, until killed.
func TestCrashHelperProcess(t *testing.T) {
	dir := os.Getenv(crashHelperEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashKeepsStoredLogs")
	}
	d, err := Open(dir, Options{GCInterval: -1}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s := d.Group("crash")
	deadline := time.Now().Add(20 * time.Second) // stops by itself
	for i := uint64(1); time.Now().Before(deadline); i += 7 {
		if err := s.StoreLogs(mkLogs(i, i+6)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Printf("stored %d\n", i+6)
	}
	os.Exit(0)
}
