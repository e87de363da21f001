package testbin

import (
	"context"
	"os"
	"sync"
	"testing"
)

var shared struct {
	once sync.Once
	bin  string
	err  error
}

// sharedBinary builds ./cmd/trident once per test process (or uses
// $TRIDENT_BIN). The temporary directory holding it lives as long as the
// test process: Main removes it.
func sharedBinary() (string, error) {
	shared.once.Do(func() {
		if bin := os.Getenv("TRIDENT_BIN"); bin != "" {
			shared.bin = bin
			return
		}
		dir, err := os.MkdirTemp("", "trident-testbin-")
		if err != nil {
			shared.err = err
			return
		}
		keepUntilExit(dir)
		shared.bin, shared.err = Build(context.Background(), dir)
	})
	return shared.bin, shared.err
}

// Start builds trident (once per test binary), starts it on a free loopback
// port with a fresh data directory under t.TempDir(), and waits until its AMQP
// port accepts connections. The process is stopped (SIGTERM) when the test
// ends; if the test failed, the tail of the process's output is logged.
// extraArgs are appended after the default flags (see the package doc).
//
// Stop, Kill and Restart of the returned Proc fail the test on error, so their
// results may be ignored.
func Start(t testing.TB, extraArgs ...string) *Proc {
	t.Helper()
	bin, err := sharedBinary()
	if err != nil {
		t.Fatalf("testbin: %v", err)
	}
	p, err := Launch(context.Background(), Options{
		Binary:    bin,
		DataDir:   t.TempDir() + "/data",
		ExtraArgs: extraArgs,
	})
	if err != nil {
		t.Fatalf("%v", err)
	}
	p.tb = t
	t.Cleanup(func() {
		p.tb = nil
		if p.Running() {
			if err := p.stop(); err != nil {
				t.Errorf("testbin: stop at cleanup: %v", err)
			}
		}
		if t.Failed() {
			if tail := p.logTail(); tail != "" {
				t.Logf("%s", tail)
			}
		}
		p.Cleanup()
	})
	return p
}

// Binary returns the trident executable Start uses (built once per test
// process, or $TRIDENT_BIN), for tests that Launch processes themselves
// (a nemesis goroutine must not fail the test through a Proc from Start).
func Binary() (string, error) { return sharedBinary() }
