package main

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestOptsParse: flags and positional arguments mix in any order; after
// "--" everything is positional, so a body may start with "-".
func TestOptsParse(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantArgs []string
		wantX    string
		wantErr  bool
	}{
		{[]string{"q", "body"}, []string{"q", "body"}, "", false},
		{[]string{"--exchange", "x", "k", "b"}, []string{"k", "b"}, "x", false},
		{[]string{"k", "--exchange=x", "b"}, []string{"k", "b"}, "x", false},
		{[]string{"k", "b", "--exchange", "x"}, []string{"k", "b"}, "x", false},
		{[]string{"k", "--", "-5", "--exchange"}, []string{"k", "-5", "--exchange"}, "", false},
		{[]string{"k", "--nope"}, nil, "", true},
	} {
		o := newOpts("t")
		x := o.fs.String("exchange", "", "")
		err := o.parse(tc.args)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err %v", tc.args, err)
			continue
		}
		if err == nil && (!reflect.DeepEqual(o.args, tc.wantArgs) || *x != tc.wantX) {
			t.Errorf("%q: args %q exchange %q, want %q %q", tc.args, o.args, *x, tc.wantArgs, tc.wantX)
		}
	}
}

func TestObjectString(t *testing.T) {
	for _, tc := range []struct {
		o    object
		want string
	}{
		{object{kind: "queue", name: "q", vhost: "/"}, "queue 'q' in vhost '/'"},
		{object{kind: "user", name: "ann"}, "user 'ann'"},
	} {
		if got := tc.o.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.o, got, tc.want)
		}
	}
}

// TestEveryCommandHasHelp: each command of the table has a summary and,
// for each form, a usage starting with its name; help prints them.
func TestEveryCommandHasHelp(t *testing.T) {
	env := func(string) string { return "" }
	for _, d := range commands {
		if d.summary == "" || len(d.forms) == 0 {
			t.Errorf("%s: no summary or forms", d.name)
		}
		for _, f := range d.forms {
			if !strings.HasPrefix(f.usage, strings.TrimSpace(d.name+" "+f.kind)) {
				t.Errorf("%s %s: usage %q", d.name, f.kind, f.usage)
			}
		}
		var out, errw bytes.Buffer
		if code := run([]string{"help", d.name}, nil, &out, &errw, env); code != 0 || !strings.Contains(out.String(), "usage: tridentctl "+d.name) {
			t.Errorf("help %s: %d %s %s", d.name, code, out.String(), errw.String())
		}
	}
}

// TestOperationsDocListsEveryCommand: docs/operations.md's synopsis is the
// command list "tridentctl help" prints, line for line.
func TestOperationsDocListsEveryCommand(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writeHelp(&b, func(string) string { return "" })
	lines := strings.Split(b.String(), "\n")
	i := slices.Index(lines, "commands:")
	if i < 0 {
		t.Fatalf("help has no commands: section:\n%s", b.String())
	}
	n := 0
	for _, l := range lines[i+1:] {
		if l == "" {
			break
		}
		n++
		if !strings.Contains(string(doc), "\n"+l+"\n") {
			t.Errorf("docs/operations.md lacks the help line %q", l)
		}
	}
	if n != len(commands)+1 { // and help
		t.Fatalf("help lists %d commands, the table has %d and help", n, len(commands))
	}
}
