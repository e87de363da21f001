package test

import (
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/trident-broker/trident/cmd/trident/node"
	"github.com/trident-broker/trident/conf"
)

// Environment of the child process that opens a copy of a store with a
// given key (oldKeyChild).
const (
	f13DirEnv    = "TRIDENT_F13_DIR"
	f13KeyEnv    = "TRIDENT_F13_KEY"
	f13NeedleEnv = "TRIDENT_F13_NEEDLE"
)

// copyDir copies the files under src to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o750)
		}
		if d.Name() == "LOCK" || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// oldKeyChild is the child process of oldKeyReads: it opens the Badger in
// $TRIDENT_F13_DIR with the key in $TRIDENT_F13_KEY and whatever key
// registry is there, and prints FOUND if a value holds the needle, DONE
// once it read everything. Badger may panic decrypting with the wrong data
// keys; the parent counts that as not read.
func oldKeyChild(dir string) {
	key, _ := hex.DecodeString(os.Getenv(f13KeyEnv))
	needle := []byte(os.Getenv(f13NeedleEnv))
	db, err := badger.Open(badger.DefaultOptions(dir).WithEncryptionKey(key).
		WithIndexCacheSize(1 << 20).WithLogger(nil))
	if err != nil {
		os.Stdout.WriteString("OPEN FAILED: " + err.Error() + "\n")
		os.Exit(0)
	}
	os.Stdout.WriteString("OPENED\n")
	_ = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				os.Stdout.WriteString("READ FAILED: " + err.Error() + "\n")
				continue
			}
			if bytes.Contains(v, needle) || bytes.Contains(it.Item().Key(), needle) {
				os.Stdout.WriteString("FOUND\n")
			}
		}
		return nil
	})
	os.Stdout.WriteString("DONE\n")
	os.Exit(0)
}

// oldKeyReads opens the Badger in dir with key, in a child process, and
// reports whether it read needle.
func oldKeyReads(t *testing.T, dir string, key, needle []byte) bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecurityF13RotationOldKey$", "-test.count=1")
	cmd.Env = append(os.Environ(), f13DirEnv+"="+dir, f13KeyEnv+"="+hex.EncodeToString(key), f13NeedleEnv+"="+string(needle))
	out, err := cmd.CombinedOutput()
	s := string(out)
	if i := strings.Index(s, "goroutine "); i > 0 {
		s = s[:i] // a panic: its first lines say enough
	}
	t.Logf("open %s with key %x…: %v\n%s", filepath.Base(dir), key[:2], err, s)
	return strings.Contains(string(out), "FOUND")
}

// TestSecurityF13RotationOldKey: after a key rotation neither the old key
// nor a copy of the old key registry reads the store: not what was
// written after the rotation, nor what was written before (the rotation
// rewrites the store under fresh data keys) (issue 38, F13).
func TestSecurityF13RotationOldKey(t *testing.T) {
	if dir := os.Getenv(f13DirEnv); dir != "" {
		oldKeyChild(dir)
		return
	}
	before, after := []byte("f13-canary-before-rotation-c41d"), []byte("f13-canary-after-rotation-77a0")
	oldKey := writeKey(t, "old", 1)
	b := startBroker(t, func(c *conf.Config) { c.Encryption.KeyFile = oldKey })
	publishPersistent(t, b.URL, "q", before)
	b.stop()
	store := filepath.Join(b.cfg.DataDir, "badger")
	oldRegistry, err := os.ReadFile(filepath.Join(store, badger.KeyRegistryFileName))
	if err != nil {
		t.Fatal(err)
	}
	beforeCopy := filepath.Join(t.TempDir(), "before")
	copyDir(t, store, beforeCopy)

	newKey := writeKey(t, "new", 2)
	cfg := b.cfg
	cfg.Encryption.RotateTo = newKey
	if err := node.RotateEncryptionKey(cfg, nil); err != nil {
		t.Fatal(err)
	}
	b.cfg.Encryption.KeyFile = newKey
	b.start()
	publishPersistent(t, b.URL, "q", after)
	b.stop()

	afterCopy := filepath.Join(t.TempDir(), "after")
	copyDir(t, store, afterCopy)
	if err := os.WriteFile(filepath.Join(afterCopy, badger.KeyRegistryFileName), oldRegistry, 0o600); err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte{1}, 32)
	if !oldKeyReads(t, beforeCopy, old, before) {
		t.Fatal("the old key does not read the store before rotation (test is blind)")
	}
	if oldKeyReads(t, afterCopy, old, after) {
		t.Fatal("the old key and the old key registry read a message written after the rotation")
	}
	if oldKeyReads(t, afterCopy, old, before) {
		t.Fatal("the old key and the old key registry read a message written before the rotation")
	}
	if dataContains(t, b.cfg.DataDir, before) || dataContains(t, b.cfg.DataDir, after) {
		t.Fatal("plain text on disk")
	}
	// The new key reads both.
	b.start()
	for _, want := range [][]byte{before, after} {
		if got := getBody(t, b.URL, "q"); !bytes.Equal(got, want) {
			t.Fatalf("after rotation got %q, want %q", got, want)
		}
	}
}

// TestSecurityF13EnableOnPlaintext: starting with encryption.key_file on a
// store written without encryption is refused with an error that says
// what to do; doing it (--rotate-encryption-key with no key_file)
// encrypts the whole store and leaves no plain text in any file of the
// data dir (issue 38, F13).
func TestSecurityF13EnableOnPlaintext(t *testing.T) {
	canary := []byte("f13-plaintext-canary-2b9e55")
	b := startBroker(t)
	publishPersistent(t, b.URL, "q", canary)
	publishPersistent(t, b.URL, "q", canary)
	b.stop()
	if !dataContains(t, b.cfg.DataDir, canary) {
		t.Fatal("plain text body not on disk without encryption (test is blind)")
	}

	key := writeKey(t, "key", 4)
	cfg := b.cfg
	cfg.Encryption.KeyFile = key
	n, err := node.Start(cfg, nil)
	if err == nil {
		_ = n.Close(context.Background())
		t.Fatal("started with encryption on a plain text store")
	}
	for _, want := range []string{"written without encryption", "--rotate-encryption-key"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}

	cfg.Encryption.KeyFile, cfg.Encryption.RotateTo = "", key
	if err := node.RotateEncryptionKey(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if dataContains(t, b.cfg.DataDir, canary) {
		t.Fatal("plain text of an earlier message left in the data dir after encrypting the store")
	}
	b.cfg.Encryption.KeyFile = key
	b.start()
	for range 2 {
		if got := getBody(t, b.URL, "q"); !bytes.Equal(got, canary) {
			t.Fatalf("after encryption got %q", got)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSecurityF13KeyFileMode: a key file the group or others may read is
// warned about at start, naming the file and its mode; an owner-only one
// is not (issue 38, F13).
func TestSecurityF13KeyFileMode(t *testing.T) {
	for _, c := range []struct {
		mode os.FileMode
		warn bool
	}{{0o644, true}, {0o640, true}, {0o602, true}, {0o600, false}, {0o400, false}} {
		key := writeKey(t, "key", 5)
		if err := os.Chmod(key, c.mode); err != nil {
			t.Fatal(err)
		}
		cfg := conf.Default()
		cfg.DataDir = t.TempDir()
		cfg.AMQP.Listen = "127.0.0.1:0"
		cfg.MQTT.Listen, cfg.MQTT.WSListen = "", ""
		cfg.STOMP.Listen, cfg.STOMP.WSListen = "", ""
		cfg.Stream.Listen, cfg.Stream.TLSListen = "", ""
		cfg.HTTP.Listen, cfg.Prometheus.Listen = "", ""
		cfg.Encryption.KeyFile = key
		var logBuf syncBuffer
		n, err := node.Start(cfg, slog.New(slog.NewTextHandler(&logBuf, nil)))
		if err != nil {
			t.Fatal(err)
		}
		_ = n.Close(context.Background())
		var warning string
		for _, l := range strings.Split(logBuf.String(), "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "key file") {
				warning = l
			}
		}
		mode := "mode=0" + octal(c.mode)
		switch {
		case c.warn && (warning == "" || !strings.Contains(warning, key) || !strings.Contains(warning, mode)):
			t.Fatalf("mode %#o: no WARN naming %s and %s in:\n%s", c.mode, key, mode, logBuf.String())
		case !c.warn && warning != "":
			t.Fatalf("mode %#o: warned: %s", c.mode, warning)
		}
	}
}

func octal(m os.FileMode) string {
	const digits = "01234567"
	p := uint32(m.Perm())
	return string([]byte{digits[p>>6&7], digits[p>>3&7], digits[p&7]})
}
