// Package version tells which build of Trident is running: the release
// (from `git describe` at `make build`), the commit and the Go version.
//
// The Makefile sets the release and the commit with -ldflags -X:
//
//	-X github.com/trident-broker/trident/cmd/internal/version.release=v0.1.0-3-g1a2b3c4
//	-X github.com/trident-broker/trident/cmd/internal/version.commit=1a2b3c4
//
// A plain `go build` or `go install` leaves them empty; the release is
// then "devel" and the commit comes from the VCS stamp Go embeds
// (vcs.revision, with "-dirty" when vcs.modified), or "unknown" when the
// build had none (e.g. -buildvcs=false, or not built in a git checkout).
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by the linker (-ldflags -X); see the package comment.
var (
	release string
	commit  string
)

// Version returns the release without a leading "v": "0.1.0" for the
// tag v0.1.0, "0.1.0-3-g1a2b3c4-dirty" past it, "devel" when the build
// did not set it.
func Version() string {
	if release == "" {
		return "devel"
	}
	v := strings.TrimPrefix(release, "v")
	if v == "" {
		return "devel"
	}
	return v
}

// Commit returns the abbreviated commit the binary was built from, with
// "-dirty" when the tree had changes; "unknown" when nothing says.
func Commit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return commitFromSettings(info.Settings)
}

// commitFromSettings reads vcs.revision and vcs.modified from the build
// settings Go embeds.
func commitFromSettings(settings []debug.BuildSetting) string {
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// GoVersion returns the Go version the binary was built with.
func GoVersion() string { return runtime.Version() }

// String returns the line --version prints for the named program:
// "trident 0.1.0 (commit 1a2b3c4, go1.26.8)".
func String(program string) string {
	return program + " " + Version() + " (commit " + Commit() + ", " + GoVersion() + ")"
}

// Requested reports whether a command line (without the program name)
// asks for the version only: its first argument is --version or
// -version.
func Requested(args []string) bool {
	return len(args) > 0 && (args[0] == "--version" || args[0] == "-version")
}
