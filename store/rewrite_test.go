package store

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// dataKeys returns the data keys of the key registry in dir, opened with
// key.
func dataKeys(t *testing.T, dir string, key []byte) [][]byte {
	t.Helper()
	kr, err := badger.OpenKeyRegistry(badger.KeyRegistryOptions{Dir: dir, ReadOnly: true,
		EncryptionKey: key, EncryptionKeyRotationDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	var out [][]byte
	for id := uint64(1); ; id++ {
		dk, err := kr.DataKey(id)
		if err != nil || dk == nil {
			return out
		}
		out = append(out, dk.Data)
	}
}

func appendSecret(t *testing.T, dir string, key []byte, seq uint64, secret []byte) {
	t.Helper()
	b, err := OpenBadger(dir, BadgerOptions{EncryptionKey: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	b.AppendMessage(1, seq, secret, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRotationRewrites: after a rotation the old key with the old key
// registry reads nothing, neither what was written before nor after it.
func TestRotationRewrites(t *testing.T) {
	before, after := []byte("CANARY-BEFORE-ROTATION-61c2"), []byte("CANARY-AFTER-ROTATION-0b7e")
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	dir := filepath.Join(t.TempDir(), "badger")
	writeSecret(t, dir, oldKey, before)
	oldRegistry, err := os.ReadFile(filepath.Join(dir, badger.KeyRegistryFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := RotateEncryptionKey(dir, oldKey, newKey, nil); err != nil {
		t.Fatal(err)
	}
	appendSecret(t, dir, newKey, 2, after)

	// Badger encrypts each table and value-log file with a data key from
	// the registry; the old registry, read with the old key, must hold
	// none of those the rotated store uses (opening the store with them
	// decrypts garbage: Badger panics, test/security_crypto_test.go does
	// it in a child process).
	cp := filepath.Join(t.TempDir(), "copy")
	if err := os.MkdirAll(cp, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cp, badger.KeyRegistryFileName), oldRegistry, 0o600); err != nil {
		t.Fatal(err)
	}
	oldDKs, newDKs := dataKeys(t, cp, oldKey), dataKeys(t, dir, newKey)
	if len(oldDKs) == 0 || len(newDKs) == 0 {
		t.Fatalf("data keys: %d old, %d new (test is blind)", len(oldDKs), len(newDKs))
	}
	for _, o := range oldDKs {
		for _, n := range newDKs {
			if bytes.Equal(o, n) {
				t.Fatal("the rotated store uses a data key the old key registry holds")
			}
		}
	}
	for _, s := range [][]byte{before, after} {
		if filesContain(t, filepath.Dir(dir), s) {
			t.Fatalf("%s in plain text on disk", s)
		}
	}
	b, err := OpenBadger(dir, BadgerOptions{EncryptionKey: newKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var got [][]byte
	if err := b.LoadMessages(1, func(seq uint64, data []byte) error {
		got = append(got, append([]byte(nil), data...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0], before) || !bytes.Equal(got[1], after) {
		t.Fatalf("after rotation the store holds %q", got)
	}
	var meta []byte
	if err := b.LoadMeta("meta/", func(key string, val []byte) error {
		meta = append([]byte(nil), val...)
		return nil
	}); err != nil || !bytes.Equal(meta, before) {
		t.Fatalf("meta after rotation: %q %v", meta, err)
	}
}

// TestEncryptPlainStore: a key given for a plain store is refused with
// ErrNotEncrypted; RotateEncryptionKey from no key encrypts it and leaves
// no plain text in any file.
func TestEncryptPlainStore(t *testing.T) {
	secret := []byte("CANARY-PLAIN-BEFORE-ENCRYPTION-93ad")
	key := bytes.Repeat([]byte{5}, 24)
	dir := filepath.Join(t.TempDir(), "badger")
	writeSecret(t, dir, nil, secret)
	if !filesContain(t, filepath.Dir(dir), secret) {
		t.Fatal("plain store without the body on disk (test is blind)")
	}
	if _, err := OpenBadger(dir, BadgerOptions{EncryptionKey: key}, nil); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("key for a plain store: %v, want ErrNotEncrypted", err)
	}
	if err := RotateEncryptionKey(dir, nil, key, nil); err != nil {
		t.Fatal(err)
	}
	if filesContain(t, filepath.Dir(dir), secret) {
		t.Fatal("plain text left after encrypting the store")
	}
	if got := readSecret(t, dir, key); !bytes.Equal(got, secret) {
		t.Fatalf("recovered %q", got)
	}
	if _, err := OpenBadger(dir, BadgerOptions{}, nil); !errors.Is(err, ErrEncryptionKey) {
		t.Fatalf("no key after encryption: %v", err)
	}
	// Running it again (e.g. after a crash at the end) changes nothing.
	if err := RotateEncryptionKey(dir, nil, key, nil); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if got := readSecret(t, dir, key); !bytes.Equal(got, secret) {
		t.Fatalf("after a second run recovered %q", got)
	}
}

// TestRotationInterrupted: each state a crash can leave between the steps
// of a rotation opens as the old or the new store.
func TestRotationInterrupted(t *testing.T) {
	secret := []byte("CANARY-INTERRUPTED-ROTATION-5e11")
	oldKey, newKey := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	setup := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "badger")
		writeSecret(t, dir, oldKey, secret)
		if err := copyStore(dir, dir+rotatingSuffix, oldKey, newKey, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("copy not committed", func(t *testing.T) {
		dir := setup(t)
		if got := readSecret(t, dir, oldKey); !bytes.Equal(got, secret) {
			t.Fatalf("recovered %q", got)
		}
		if exists(dir + rotatingSuffix) {
			t.Fatal("partial copy left")
		}
	})
	t.Run("committed, not in place", func(t *testing.T) {
		dir := setup(t)
		if err := os.Rename(dir, dir+oldSuffix); err != nil {
			t.Fatal(err)
		}
		if got := readSecret(t, dir, newKey); !bytes.Equal(got, secret) {
			t.Fatalf("recovered %q", got)
		}
		if exists(dir+oldSuffix) || exists(dir+rotatingSuffix) {
			t.Fatal("rotation left directories")
		}
	})
	t.Run("in place, old not removed", func(t *testing.T) {
		dir := setup(t)
		if err := os.Rename(dir, dir+oldSuffix); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dir+rotatingSuffix, dir); err != nil {
			t.Fatal(err)
		}
		// The rotation command run again finishes it too.
		if err := RotateEncryptionKey(dir, oldKey, newKey, nil); err != nil {
			t.Fatal(err)
		}
		if exists(dir + oldSuffix) {
			t.Fatal("old store left")
		}
		if got := readSecret(t, dir, newKey); !bytes.Equal(got, secret) {
			t.Fatalf("recovered %q", got)
		}
	})
	t.Run("store in use", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "badger")
		b, err := OpenBadger(dir, BadgerOptions{EncryptionKey: oldKey}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := RotateEncryptionKey(dir, oldKey, newKey, nil); !errors.Is(err, ErrStoreInUse) {
			t.Fatalf("rotation of an open store: %v", err)
		}
	})
}

// Environment of TestRotationKilled's child, which rotates the store in
// $TRIDENT_ROTATE_KILL_DIR from the hex key $..._FROM to $..._TO.
const rotateKillEnv = "TRIDENT_ROTATE_KILL_DIR"

// TestRotationKilled kills a rotation with SIGKILL at several points: the
// store then opens with the old key or the new one, with every message.
func TestRotationKilled(t *testing.T) {
	if dir := os.Getenv(rotateKillEnv); dir != "" {
		from, _ := hex.DecodeString(os.Getenv(rotateKillEnv + "_FROM"))
		to, _ := hex.DecodeString(os.Getenv(rotateKillEnv + "_TO"))
		os.Stdout.WriteString("START\n")
		if err := RotateEncryptionKey(dir, from, to, nil); err != nil {
			os.Stdout.WriteString("ERROR " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("DONE\n")
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	keys := [2][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)}
	const n = 2000
	body := func(seq uint64) []byte { return bytes.Repeat([]byte{byte(seq)}, 4096) }
	dir := filepath.Join(t.TempDir(), "badger")
	b, err := OpenBadger(dir, BadgerOptions{EncryptionKey: keys[0]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, n)
	for seq := uint64(1); seq <= n; seq++ {
		b.AppendMessage(1, seq, body(seq), func(err error) { done <- err })
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	must(t, b.Close())

	cur := 0 // index of the key the store is encrypted with
	seen := map[string]bool{}
	// Round 0 rotates to the end and times it; the later ones are killed
	// at sixths of that time, then one more runs to the end.
	delays := []time.Duration{-1}
	var full time.Duration
	for round := 0; round < len(delays); round++ {
		delay := delays[round]
		started := time.Now()
		cmd := exec.Command(os.Args[0], "-test.run=^TestRotationKilled$", "-test.count=1")
		cmd.Env = append(os.Environ(), rotateKillEnv+"="+dir,
			rotateKillEnv+"_FROM="+hex.EncodeToString(keys[cur]), rotateKillEnv+"_TO="+hex.EncodeToString(keys[1-cur]))
		out, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		r := bufio.NewReader(out)
		if line, _ := r.ReadString('\n'); line != "START\n" {
			t.Fatalf("round %d: child said %q", round, line)
		}
		if delay >= 0 {
			time.Sleep(delay)
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
		rest, _ := io.ReadAll(r)
		werr := cmd.Wait()
		if delay < 0 && werr != nil {
			t.Fatalf("rotation failed: %v %s", werr, rest)
		}
		if round == 0 {
			full = time.Since(started)
			for k := range 6 {
				delays = append(delays, full*time.Duration(k)/6)
			}
			delays = append(delays, -1)
		}
		// One of the keys opens the store, with every message.
		var s *Badger
		for _, k := range []int{cur, 1 - cur} {
			if s, err = OpenBadger(dir, BadgerOptions{EncryptionKey: keys[k]}, nil); err == nil {
				state := map[bool]string{true: "old", false: "new"}[k == cur]
				seen[state] = true
				t.Logf("round %d (kill after %v): the %s key opens it", round, delay, state)
				cur = k
				break
			}
			if !errors.Is(err, ErrEncryptionKey) {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if s == nil {
			t.Fatalf("round %d: neither key opens the store", round)
		}
		count := 0
		must(t, s.LoadMessages(1, func(seq uint64, data []byte) error {
			if !bytes.Equal(data, body(seq)) {
				return fmt.Errorf("message %d corrupt", seq)
			}
			count++
			return nil
		}))
		must(t, s.Close())
		if count != n {
			t.Fatalf("round %d: %d messages, want %d", round, count, n)
		}
		if exists(dir+rotatingSuffix) || exists(dir+oldSuffix) {
			t.Fatalf("round %d: the open left a rotation's directories", round)
		}
	}
	if !seen["new"] {
		t.Fatal("no rotation completed")
	}
	t.Logf("a whole rotation took %v here", full)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
