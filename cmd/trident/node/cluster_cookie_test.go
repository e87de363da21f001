package node

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trident-broker/trident/conf"
)

// TestClusterCookie: without cluster.cookie a node generates its cookie
// into <data_dir>/cluster.cookie once and reuses it; cluster.cookie wins;
// a cookie file readable by others is warned about.
func TestClusterCookie(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	dir := t.TempDir()
	first, err := clusterCookie(conf.Cluster{}, dir, log)
	if err != nil || len(first) < 43 {
		t.Fatalf("generated %q, %v", first, err)
	}
	if !strings.Contains(logs.String(), "generated a new cluster cookie") {
		t.Fatalf("no WARN about the new cookie: %s", logs.String())
	}
	again, err := clusterCookie(conf.Cluster{}, dir, log)
	if err != nil || again != first {
		t.Fatalf("second start: %q, %v; want %q", again, err, first)
	}
	if c, _ := clusterCookie(conf.Cluster{Cookie: "set"}, dir, log); c != "set" {
		t.Fatalf("cluster.cookie ignored: %q", c)
	}
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.WriteFile(shared, []byte("shared-secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(shared, 0o644)
	logs.Reset()
	if c, err := clusterCookie(conf.Cluster{CookieFile: shared}, dir, log); err != nil || c != "shared-secret" {
		t.Fatalf("cookie_file: %q, %v", c, err)
	}
	if !strings.Contains(logs.String(), "readable by group or others") {
		t.Fatalf("no WARN about a 0644 cookie file: %s", logs.String())
	}
	empty := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(empty, nil, 0o600)
	if _, err := clusterCookie(conf.Cluster{CookieFile: empty}, dir, log); err == nil {
		t.Fatal("an empty cookie file accepted")
	}
}
