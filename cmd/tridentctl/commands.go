package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// The command table: every command's forms, their usage line and flags.
// Parsing and help both read it, so "tridentctl help CMD" prints the
// flags the command really takes.

// form is one way to call a command: "declare queue NAME" is the form
// "queue" of declare. setup declares the form's flags on o and returns
// what runs once they are parsed (it must not touch c before that: help
// calls it only to list the flags).
type form struct {
	kind  string // the word after the command ("" for commands without one)
	usage string // after "tridentctl "
	about string // optional: more lines of help
	setup func(c *command, o *opts) func() error
}

// cmdDef is one command.
type cmdDef struct {
	name    string
	args    string // for the command list, e.g. "ROUTING_KEY [BODY]"
	summary string
	forms   []form
}

// kindWord names what a command's KIND is, for errors ("declare what?").
func (d *cmdDef) kinds() []string {
	var ks []string
	for _, f := range d.forms {
		if f.kind != "" {
			ks = append(ks, f.kind)
		}
	}
	return ks
}

func (d *cmdDef) form(kind string) *form {
	for i := range d.forms {
		if d.forms[i].kind == kind {
			return &d.forms[i]
		}
	}
	return nil
}

// commands is the table of commandTable (cli.go and cluster.go hold the
// implementations), a plain initialised variable: no init().
var commands = commandTable()

func findCommand(name string) *cmdDef {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// globals are the flags every command takes.
type globals struct {
	url, user, pass, token, vhost, format string
	all                                   bool
}

// register declares the global flags on fs. Those that may follow the
// command (url, vhost, format, token, all-vhosts) are declared on every
// command's flag set too, unless the command has a flag of that name;
// user and password only before the command (declare user and declare
// permission have their own --password and --user). Secrets from the
// environment are never shown as defaults.
func (g *globals) register(fs *flag.FlagSet, beforeCommand bool) {
	def := func(name string) bool { return fs.Lookup(name) == nil }
	if def("url") {
		fs.StringVar(&g.url, "url", g.url, "management API base `URL` ($TRIDENT_URL)")
	}
	if def("vhost") {
		fs.StringVar(&g.vhost, "vhost", g.vhost, "virtual host `VHOST` ($TRIDENT_VHOST)")
	}
	if def("format") {
		fs.StringVar(&g.format, "format", g.format, "output `FORMAT`: table or json")
	}
	if def("token") {
		fs.Func("token", "OAuth 2 access `TOKEN`, sent as Bearer instead of --user and --password ($TRIDENT_TOKEN)",
			func(s string) error { g.token = s; return nil })
	}
	if def("all-vhosts") {
		fs.BoolVar(&g.all, "all-vhosts", g.all, "list objects of every vhost")
	}
	if beforeCommand {
		fs.StringVar(&g.user, "user", g.user, "`USER` name ($TRIDENT_USER)")
		fs.Func("password", "`PASSWORD` ($TRIDENT_PASSWORD; default guest)", func(s string) error { g.pass = s; return nil })
	}
}

func newGlobals(env func(string) string) *globals {
	return &globals{url: envOr(env, "TRIDENT_URL", "http://127.0.0.1:15672"), user: envOr(env, "TRIDENT_USER", "guest"),
		pass: envOr(env, "TRIDENT_PASSWORD", "guest"), token: env("TRIDENT_TOKEN"), vhost: envOr(env, "TRIDENT_VHOST", "/"),
		format: "table"}
}

// run is tridentctl: it returns the exit status (0 done, 1 failed, 2
// usage error).
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) int {
	g := newGlobals(env)
	gf := flag.NewFlagSet("tridentctl", flag.ContinueOnError)
	gf.SetOutput(io.Discard)
	g.register(gf, true)
	if err := gf.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(stdout, env)
			return 0
		}
		fmt.Fprintf(stderr, "tridentctl: %v\nrun \"tridentctl help\" for the commands and flags\n", err)
		return 2
	}
	rest := gf.Args()
	if len(rest) == 0 {
		writeHelp(stderr, env)
		return 2
	}
	if rest[0] == "help" {
		return help(rest[1:], stdout, stderr, env)
	}
	def := findCommand(rest[0])
	if def == nil {
		fmt.Fprintf(stderr, "tridentctl: unknown command %q\nrun \"tridentctl help\" for the commands\n", rest[0])
		return 2
	}
	a := rest[1:]
	kind := ""
	if len(def.kinds()) > 0 {
		if len(a) == 0 || isHelpFlag(a[0]) {
			if len(a) > 0 {
				writeCommandHelp(stdout, def, nil)
				return 0
			}
			fmt.Fprintf(stderr, "tridentctl: %s what? one of %s\n\n", def.name, strings.Join(def.kinds(), ", "))
			writeCommandHelp(stderr, def, nil)
			return 2
		}
		kind, a = a[0], a[1:]
	}
	f := def.form(kind)
	if f == nil {
		fmt.Fprintf(stderr, "tridentctl: %s what? %q is not one of %s\n", def.name, kind, strings.Join(def.kinds(), ", "))
		return 2
	}
	c := &command{g: g, stdin: stdin, stderr: stderr}
	o := newOpts(def.name)
	exec := f.setup(c, o)
	g.register(o.fs, false)
	if err := o.parse(a); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeCommandHelp(stdout, def, f)
			return 0
		}
		fmt.Fprintf(stderr, "tridentctl: %s: %v\nusage: tridentctl %s\nrun \"tridentctl help %s\" for its flags\n",
			def.name, err, f.usage, def.name)
		return 2
	}
	if g.format != "table" && g.format != "json" {
		fmt.Fprintf(stderr, "tridentctl: --format must be table or json, not %q\n", g.format)
		return 2
	}
	c.c = &client{base: strings.TrimSuffix(g.url, "/"), user: g.user, pass: g.pass, token: g.token,
		http: &http.Client{Timeout: 30 * time.Second}}
	c.o = &out{w: stdout, format: g.format}
	if err := exec(); err != nil {
		fmt.Fprintln(stderr, "tridentctl:", err)
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "usage: tridentctl %s\n", f.usage)
			return 2
		}
		return 1
	}
	return 0
}

func isHelpFlag(s string) bool {
	switch s {
	case "-h", "-help", "--help", "-?":
		return true
	}
	return false
}

// help is "tridentctl help [COMMAND]".
func help(a []string, stdout, stderr io.Writer, env func(string) string) int {
	if len(a) == 0 {
		writeHelp(stdout, env)
		return 0
	}
	def := findCommand(a[0])
	if def == nil {
		fmt.Fprintf(stderr, "tridentctl: no command %q\nrun \"tridentctl help\" for the commands\n", a[0])
		return 2
	}
	var f *form
	if len(a) > 1 {
		if f = def.form(a[1]); f == nil {
			fmt.Fprintf(stderr, "tridentctl: %s has no %q; one of %s\n", def.name, a[1], strings.Join(def.kinds(), ", "))
			return 2
		}
	}
	writeCommandHelp(stdout, def, f)
	return 0
}

// writeHelp lists every command with one line each, and the global flags.
func writeHelp(w io.Writer, env func(string) string) {
	fmt.Fprintln(w, "usage: tridentctl [global flags] COMMAND [ARGS] [flags]")
	fmt.Fprintln(w, "\nTrident's operator CLI, a client of the management HTTP API (it also works against RabbitMQ).")
	fmt.Fprintln(w, "\ncommands:")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, d := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(d.name+" "+d.args), d.summary)
	}
	fmt.Fprintf(tw, "  help [COMMAND]\tthis list, or one command's usage and flags\n")
	tw.Flush()
	fmt.Fprintln(w, "\nglobal flags (--url, --vhost, --format, --token and --all-vhosts also after the command):")
	fs := flag.NewFlagSet("tridentctl", flag.ContinueOnError)
	newGlobals(func(k string) string {
		if k == "TRIDENT_PASSWORD" || k == "TRIDENT_TOKEN" {
			return ""
		}
		return env(k)
	}).register(fs, true)
	printFlags(w, fs)
	fmt.Fprintln(w, "\nrun \"tridentctl help COMMAND\" or \"tridentctl COMMAND --help\" for a command's usage and flags;")
	fmt.Fprintln(w, "\"tridentctl --version\" prints the version, commit and Go version.")
}

// writeCommandHelp prints a command's forms (only f when set) with their
// flags.
func writeCommandHelp(w io.Writer, d *cmdDef, f *form) {
	fmt.Fprintf(w, "tridentctl %s: %s\n", d.name, d.summary)
	for _, fm := range d.forms {
		if f != nil && fm.kind != f.kind {
			continue
		}
		fmt.Fprintf(w, "\nusage: tridentctl %s\n", fm.usage)
		if fm.about != "" {
			for _, l := range strings.Split(fm.about, "\n") {
				fmt.Fprintln(w, "  "+l)
			}
		}
		o := newOpts(d.name)
		fm.setup(&command{}, o)
		if hasFlags(o.fs) {
			fmt.Fprintln(w, "flags:")
			printFlags(w, o.fs)
		}
	}
	fmt.Fprintln(w, "\nglobal flags (before or after the command): --url, --vhost, --format table|json, --token, --all-vhosts;")
	fmt.Fprintln(w, "before it: --user, --password. See \"tridentctl help\".")
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// printFlags prints fs's flags as "  --name VALUE  usage (default x)".
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var fl []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { fl = append(fl, f) })
	sort.Slice(fl, func(i, j int) bool { return fl[i].Name < fl[j].Name })
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, f := range fl {
		name, usage := flag.UnquoteUsage(f)
		arg := "--" + f.Name
		if name != "" {
			arg += " " + name
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			arg = "--" + f.Name
		}
		d := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" {
			d = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(tw, "  %s\t%s%s\n", arg, usage, d)
	}
	tw.Flush()
}
