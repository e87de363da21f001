package version

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestVersionFromRelease(t *testing.T) {
	defer func(r string) { release = r }(release)
	for _, c := range []struct{ release, want string }{
		{"", "devel"},
		{"v", "devel"},
		{"v0.1.0", "0.1.0"},
		{"v0.1.0-3-g1a2b3c4-dirty", "0.1.0-3-g1a2b3c4-dirty"},
		{"1a2b3c4", "1a2b3c4"}, // git describe --always without a tag
	} {
		release = c.release
		if got := Version(); got != c.want {
			t.Errorf("release %q: Version() = %q, want %q", c.release, got, c.want)
		}
	}
}

func TestCommitFromSettings(t *testing.T) {
	s := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, c := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"none", nil, "unknown"},
		{"clean", s("vcs", "git", "vcs.revision", "0b18a3b5e1c2d3f4a5b6c7d8e9f00112233445566", "vcs.modified", "false"), "0b18a3b"},
		{"dirty", s("vcs.modified", "true", "vcs.revision", "0b18a3b5e1c2d3f4"), "0b18a3b-dirty"},
		{"short", s("vcs.revision", "abc"), "abc"},
		{"modified without revision", s("vcs.modified", "true"), "unknown"},
	} {
		if got := commitFromSettings(c.settings); got != c.want {
			t.Errorf("%s: commitFromSettings = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestCommitSetByLinker(t *testing.T) {
	defer func(c string) { commit = c }(commit)
	commit = "1a2b3c4"
	if got := Commit(); got != "1a2b3c4" {
		t.Errorf("Commit() = %q", got)
	}
}

func TestString(t *testing.T) {
	defer func(r, c string) { release, commit = r, c }(release, commit)
	release, commit = "v0.1.0", "1a2b3c4"
	want := "trident 0.1.0 (commit 1a2b3c4, " + runtime.Version() + ")"
	if got := String("trident"); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	release, commit = "", ""
	if got := String("tridentctl"); !regexp.MustCompile(`^tridentctl devel \(commit \S+, go`).MatchString(got) {
		t.Errorf("String without ldflags = %q", got)
	}
}

func TestRequested(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"--version", "x"}, true},
		{[]string{"--config", "f.yaml"}, false},
		{[]string{"--default-pass", "--version"}, false}, // a value, not the flag
		{[]string{"version"}, false},
	} {
		if got := Requested(c.args); got != c.want {
			t.Errorf("Requested(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
