package jepsen

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/test/testbin"
)

// envDuration reads a duration from the environment, or returns def.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// launchNode starts one trident process without tying it to t, so that a
// nemesis goroutine may kill and restart it (a Proc from testbin.Start
// fails the test from whatever goroutine an error happens on).
func launchNode(t *testing.T) *testbin.Proc {
	t.Helper()
	bin := os.Getenv("TRIDENT_BIN")
	if bin == "" {
		var err error
		if bin, err = testbin.Build(context.Background(), t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	p, err := testbin.Launch(context.Background(), testbin.Options{Binary: bin, DataDir: filepath.Join(t.TempDir(), "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.Running() {
			if err := p.Stop(); err != nil {
				t.Errorf("stop: %v", err)
			}
		}
		if t.Failed() && p.LogPath != "" {
			if b, err := os.ReadFile(p.LogPath); err == nil {
				if len(b) > 8192 {
					b = b[len(b)-8192:]
				}
				t.Logf("tail of %s:\n%s", p.LogPath, b)
			}
		}
		p.Cleanup()
	})
	return p
}

// killRestartNemesis kills one node with SIGKILL every interval (jittered
// ±50%), leaves it down for up to 500 ms and starts it again on the same
// data directory and port. A kill is recorded just before the signal, a
// restart once the node listens again.
func killRestartNemesis(p *testbin.Proc, interval time.Duration) func(context.Context, func(Event)) {
	return func(ctx context.Context, record func(Event)) {
		for {
			wait := interval/2 + rand.N(interval)
			if !sleep(ctx, wait) {
				return
			}
			record(Event{Kind: Kill, Node: 0, Detail: "SIGKILL"})
			if err := p.Kill(); err != nil {
				record(Event{Kind: Info, Node: 0, Detail: "kill failed", Err: err})
			}
			sleep(ctx, rand.N(500*time.Millisecond))
			if ctx.Err() != nil {
				return // Heal restarts it
			}
			err := p.Restart()
			record(Event{Kind: Restart, Node: 0, Detail: "listening", Err: err})
		}
	}
}

// healRestart starts the node again if the nemesis left it down.
func healRestart(p *testbin.Proc) func(context.Context, func(Event)) error {
	return func(ctx context.Context, record func(Event)) error {
		if p.Running() {
			record(Event{Kind: Heal, Node: -1, Detail: "nothing to heal"})
			return nil
		}
		err := p.Restart()
		record(Event{Kind: Restart, Node: 0, Detail: "heal", Err: err})
		return err
	}
}

// writeHistory saves h as JSON lines to $JEPSEN_HISTORY, or to a file in
// t.TempDir().
func writeHistory(t *testing.T, h History) {
	t.Helper()
	path := os.Getenv("JEPSEN_HISTORY")
	if path == "" {
		path = filepath.Join(t.TempDir(), "history.jsonl")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := h.WriteJSONL(f); err != nil {
		t.Fatal(err)
	}
	t.Logf("history: %d ops in %s", len(h), path)
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestSingleNodeKillRestart runs the workload against one trident process
// that is killed with SIGKILL and restarted every ~3 s, on a durable classic
// queue, and checks that no confirmed message is lost, no duplicate lacks
// the redelivered flag, and nothing is delivered that was not published.
//
// JEPSEN_DURATION (default 20s) sets how long the nemesis runs;
// JEPSEN_KILL_INTERVAL (default 3s) the mean time between kills;
// JEPSEN_HISTORY a path to keep the history at.
func TestSingleNodeKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the real binary for ~20 s")
	}
	p := launchNode(t)
	cfg := Config{
		Addrs:      []string{p.AMQPURL},
		Queue:      "jepsen-classic",
		Publishers: 2,
		Consumers:  2,
		Duration:   envDuration(t, "JEPSEN_DURATION", 20*time.Second),
		Nemesis:    killRestartNemesis(p, envDuration(t, "JEPSEN_KILL_INTERVAL", 3*time.Second)),
		Heal:       healRestart(p),
		Logger:     slog.New(slog.NewTextHandler(testLogWriter{t}, nil)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+3*time.Minute)
	defer cancel()
	h, err := Run(ctx, cfg)
	writeHistory(t, h)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(h)
	t.Logf("%v", r)
	if err := r.Err(); err != nil {
		t.Error(err)
	}
	if r.Confirmed == 0 || r.NemesisEvents == 0 {
		t.Errorf("degenerate run: %v", r)
	}
}
