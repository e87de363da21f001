package main

import (
	"bytes"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedUpToDate regenerates methods_gen.go in memory and compares it
// with the committed file.
func TestGeneratedUpToDate(t *testing.T) {
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", specModule).Output()
	if err != nil {
		t.Skipf("cannot locate %s: %v", specModule, err)
	}
	raw, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), specFile))
	if err != nil {
		t.Skip(err)
	}
	var s spec
	if err := xml.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	got, err := generate(&s)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../methods_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("methods_gen.go is stale: run go generate ./protocol/amqp/wire/")
	}
}
