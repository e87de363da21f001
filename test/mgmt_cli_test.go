package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	ctlOnce sync.Once
	ctlPath string
	ctlErr  error
)

// tridentctl builds cmd/tridentctl once per test binary.
func tridentctl(t *testing.T) string {
	t.Helper()
	ctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tridentctl")
		if err != nil {
			ctlErr = err
			return
		}
		ctlPath = filepath.Join(dir, "tridentctl")
		out, err := exec.Command("go", "build", "-o", ctlPath, "github.com/trident-broker/trident/cmd/tridentctl").CombinedOutput()
		if err != nil {
			ctlErr = err
			ctlPath = string(out)
		}
	})
	if ctlErr != nil {
		t.Fatalf("build tridentctl: %v\n%s", ctlErr, ctlPath)
	}
	return ctlPath
}

// runCtl runs tridentctl against the API at base as user and checks its
// exit status; it returns the combined output.
func runCtl(t *testing.T, base, user, pass string, want int, args ...string) string {
	t.Helper()
	cmd := exec.Command(tridentctl(t), args...)
	cmd.Env = append(os.Environ(), "TRIDENT_URL="+base, "TRIDENT_USER="+user, "TRIDENT_PASSWORD="+pass)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("tridentctl %v as %s: exit %d, want %d\n%s", args, user, code, want, out)
	}
	return string(out)
}

func TestMgmtCLI(t *testing.T) {
	_, base := mgmtBroker(t)
	run := func(want int, args ...string) string {
		t.Helper()
		return runCtl(t, base, "guest", "guest", want, args...)
	}
	run(0, "declare", "vhost", "cv")
	run(0, "--vhost", "cv", "declare", "queue", "orders", "--arg", "x-max-length=5")
	run(0, "--vhost", "cv", "declare", "exchange", "ev", "--type", "topic")
	run(0, "--vhost", "cv", "declare", "binding", "--source", "ev", "--destination", "orders", "--routing-key", "o.#")
	out := run(0, "--vhost", "cv", "list", "queues")
	if !strings.Contains(out, "orders") || !strings.Contains(out, "messages_ready") {
		t.Errorf("list queues table:\n%s", out)
	}
	var qs []map[string]any
	if err := json.Unmarshal([]byte(run(0, "--vhost", "cv", "--format", "json", "list", "queues")), &qs); err != nil || len(qs) != 1 {
		t.Fatalf("list queues json: %v %v", err, qs)
	}
	if out := run(0, "--vhost", "cv", "list", "bindings"); !strings.Contains(out, "o.#") {
		t.Errorf("bindings:\n%s", out)
	}
	if out := run(0, "--vhost", "cv", "publish", "--exchange", "ev", "--routing-key", "o.1", "--payload", "hello"); !strings.Contains(out, "published") || strings.Contains(out, "NOT") {
		t.Errorf("publish: %s", out)
	}
	if out := run(0, "--vhost", "cv", "get", "--queue", "orders", "--ackmode", "ack_requeue_false"); !strings.Contains(out, "hello") {
		t.Errorf("get: %s", out)
	}
	run(0, "declare", "user", "ann", "--password", "pw", "--tags", "monitoring")
	run(0, "--vhost", "cv", "declare", "permission", "--user", "ann", "--read", ".*")
	if out := run(0, "list", "permissions"); !strings.Contains(out, "ann") {
		t.Errorf("permissions: %s", out)
	}
	if out := run(0, "list", "users"); !strings.Contains(out, "monitoring") {
		t.Errorf("users: %s", out)
	}
	// A monitoring user cannot delete.
	cmd := exec.Command(tridentctl(t), "--url", base, "--user", "ann", "--password", "pw", "--vhost", "/", "delete", "vhost", "cv")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "401") {
		t.Errorf("monitoring delete vhost: %v %s", err, out)
	}
	file := filepath.Join(t.TempDir(), "defs.json")
	run(0, "export", file)
	run(0, "--vhost", "cv", "delete", "queue", "orders")
	run(0, "import", file)
	if out := run(0, "--vhost", "cv", "list", "queues"); !strings.Contains(out, "orders") {
		t.Errorf("import did not restore the queue:\n%s", out)
	}
	if out := run(0, "list", "connections"); !strings.Contains(out, "name") {
		t.Errorf("connections: %s", out)
	}
	out = run(1, "close", "connection", "nope")
	if !strings.Contains(out, "connection 'nope' not found") {
		t.Errorf("close missing connection: %s", out)
	}
	run(2, "frobnicate")
	run(0, "--vhost", "cv", "delete", "exchange", "ev")
	run(0, "delete", "user", "ann")
	run(0, "delete", "vhost", "cv")
}
