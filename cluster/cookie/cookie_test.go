package cookie

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLoadGeneratesOnceAndReuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "cluster.cookie")
	r, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created || len(r.Cookie) < 43 || r.Mode != 0o600 || r.TooOpen() {
		t.Fatalf("first load: %+v", r)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v %v", fi.Mode(), err)
	}
	again, err := Load(path)
	if err != nil || again.Created || again.Cookie != r.Cookie {
		t.Fatalf("second load: %+v %v, want %q reused", again, err, r.Cookie)
	}
	other, err := Load(filepath.Join(t.TempDir(), "c"))
	if err != nil || other.Cookie == r.Cookie {
		t.Fatalf("another directory's cookie: %+v %v", other, err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".cookie-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestLoadConcurrentAgree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.cookie")
	const n = 8
	got := make([]Result, n)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			r, err := Load(path)
			if err != nil {
				t.Error(err)
			}
			got[i] = r
		})
	}
	wg.Wait()
	created := 0
	for _, r := range got {
		if r.Cookie != got[0].Cookie {
			t.Fatalf("cookies differ: %q %q", r.Cookie, got[0].Cookie)
		}
		if r.Created {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d loads created the file, want 1", created)
	}
}

func TestLoadExisting(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, content string
		mode          os.FileMode
		want          string
		err           error
		open          bool
	}{
		{"trimmed", "s3cret\n", 0o600, "s3cret", nil, false},
		{"open", "s3cret", 0o644, "s3cret", nil, true},
		{"empty", "", 0o600, "", ErrEmpty, false},
		{"blank", " \n\t\n", 0o600, "", ErrEmpty, false},
		{"long", strings.Repeat("x", 300), 0o600, "", ErrTooLong, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name)
			content := c.content
			if err := os.WriteFile(p, []byte(content), c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, c.mode); err != nil {
				t.Fatal(err)
			}
			r, err := Load(p)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if err == nil && (r.Cookie != c.want || r.Created || r.TooOpen() != c.open) {
				t.Fatalf("%+v", r)
			}
			if b, _ := os.ReadFile(p); string(b) != content {
				t.Fatal("an existing file was rewritten")
			}
		})
	}
}

func TestLoadNotAFile(t *testing.T) {
	if _, err := Load(t.TempDir()); err == nil {
		t.Fatal("a directory accepted as the cookie file")
	}
}
