package test

// TestDocsCommands runs the commands of README.md and docs/*.md (issue 39:
// every command in the docs is run by a test). `make docs-check` runs it
// alone; `make test` runs it with the rest of ./test.
//
// Every fenced block of those files must carry a tag:
//
//	sh, bash, shell  commands, run in order per file (see docRules)
//	console          the same, on lines after a "$ " prompt
//	yaml             a trident config (loaded by conf.Load, so a wrong key
//	                 or value fails) or a Kubernetes env list (every
//	                 TRIDENT_* name must be one trident reads)
//	json             must parse
//	text             not a command: a synopsis, a schema, output
//
// A block without a tag, or with another, fails the check.
//
// A command line (continuations joined, comments dropped) runs with bash
// -o pipefail from the module root, with a timeout. The documented
// defaults are mapped to the test's, explicitly:
//
//   - the listeners of the broker get free loopback ports, given to trident
//     by its environment variables (TRIDENT_AMQP_LISTEN, ...), data in a
//     temporary directory (TRIDENT_DATA_DIR);
//   - in client commands, localhost:5672 (15672, 61613, ...) becomes
//     127.0.0.1 and the test broker's port, and mosquitto's -h localhost
//     gets -p and the test broker's MQTT port (docPortSubst);
//   - make builds into a temporary BIN (MAKEFLAGS=BIN=...), which is first
//     on PATH, and bin/ or ./bin/ in a command is that directory;
//     tridentctl gets TRIDENT_URL; curl gets --fail from a .curlrc in
//     CURL_HOME, so an HTTP error fails the command.
//
// How a command is checked is decided by the first rule of docRules whose
// pattern matches it: run to completion (the default), start in the
// background, run a server until it listens, only parse its flags (-h
// appended), only expand a make target (make -n), or not checked, with the
// reason. A rule that matches no command fails the check, so the list
// stays what the docs hold. A failure names file:line and the command.
//
// Commands written inline in prose are checked where docInline lists them
// (those a reader runs as written); a client command whose address the
// check does not map (localhost without a mapped port, mosquitto without
// -h localhost) fails rather than reach another broker on the machine.
// The programs the commands use are required (docTools; TRIDENT_TEST_DEPS=skip
// skips the check without them, saying so).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// docMode is how a command is checked.
type docMode int

const (
	modeRun        docMode = iota // run; exit status 0 within docCmdTimeout
	modeBackground                // "cmd &": started, runs beside the next commands of its block, then stopped
	modeUntilStop                 // runs until interrupted (a subscriber): must print want and still run
	modeServer                    // starts a broker: must listen on its AMQP port and keep running
	modeFlags                     // long-running or needs a cluster: run with -h appended, its flags must parse
	modeMakeDry                   // a long make target: make -n, the target must exist and expand
	modeSkip                      // not checked: reason says why
)

var docModeNames = map[docMode]string{
	modeRun: "run", modeBackground: "run in the background", modeUntilStop: "run until interrupted",
	modeServer: "run as a server", modeFlags: "flags parsed (-h)", modeMakeDry: "make -n", modeSkip: "not checked",
}

// docRule decides how the commands its pattern matches are checked.
type docRule struct {
	pattern string // regexp on the command (continuations joined, comments dropped)
	mode    docMode
	reason  string                        // why the command is not run as written (every mode but modeRun)
	want    string                        // output (stdout and stderr) must contain this
	keep    bool                          // modeServer: the broker serves the rest of its file's commands
	jsonLog bool                          // modeServer: the broker must log JSON lines
	names   *regexp.Regexp                // modeFlags: the flag value it captures is a comma-separated list of names the -h output must hold
	ready   func(t *testing.T, e *docEnv) // modeBackground, modeUntilStop: wait until the command is ready
}

const docCmdTimeout = 60 * time.Second

var docRules = []docRule{
	// README.md
	{pattern: `^make run$`, mode: modeServer, keep: true,
		reason: "starts the broker the file's client commands then use: listeners on free ports, data in a temporary directory"},
	{pattern: `^make test$`, mode: modeMakeDry,
		reason: "the whole suite, which runs this check: make -n test"},
	{pattern: `/api/queues/%2F/hello/get$`, want: "hi from curl"},
	{pattern: `^amqp-get `, want: "hi from AMQP"},
	{pattern: `^bin/tridentctl get hello `, want: "hi from tridentctl"},
	{pattern: `SEND\\ndestination:/queue/hello.*DISCONNECT\\nreceipt:bye.*socat`, want: "receipt-id:bye"},
	{pattern: `^mosquitto_sub .*&$`, mode: modeBackground, want: "sensors/t1 21.5",
		reason: "a subscriber in the background: stopped after the next commands of its block, must have printed the message",
		ready:  waitBinding("amq.topic", "sensors.#")},
	{pattern: `sleep 30\) *\| *socat`, mode: modeUntilStop, ready: waitBinding("amq.topic", "sensors.#"),
		reason: "a subscriber that runs until interrupted: it must subscribe (its binding appears on amq.topic) and keep running; " +
			"what it prints is not read (tr's output is buffered when it is not a terminal)"},

	// configuration.md, operations.md
	{pattern: `^TRIDENT_LOG_FORMAT=json make run$`, mode: modeServer, jsonLog: true,
		reason: "a broker on free ports, stopped once it listens; its log lines must be JSON"},
	{pattern: `^make run ARGS=`, mode: modeServer,
		reason: "a broker on free ports (the documented 127.0.0.1 ports mapped), stopped once it listens on its AMQP port"},
	{pattern: `^\./bin/trident --config trident\.yaml`, mode: modeFlags,
		reason: "needs trident.yaml and /var/lib/trident: its flags are parsed (the YAML blocks are loaded on their own)"},
	{pattern: `^make image$`, mode: modeMakeDry, reason: "builds a container image (minutes, podman): make -n image; TestPkgDockerfile builds the image where podman is installed"},
	{pattern: `^deploy/gen-certs\.sh$`, mode: modeSkip, reason: "writes deploy/secrets in the source tree; TestPkgCompose runs it in a copy of deploy/"},
	{pattern: `^export TRIDENT_ADMIN_PASSWORD=`, mode: modeSkip, reason: "a placeholder the reader fills in"},
	{pattern: `^docker compose `, mode: modeSkip, reason: "a 3-node cluster in containers; TestPkgCompose runs deploy/compose.yaml's three nodes as processes"},
	{pattern: `^install `, mode: modeSkip, reason: "installs into /usr/local and /etc of the machine"},
	{pattern: `^systemctl `, mode: modeSkip, reason: "needs systemd as PID 1; TestPkgSystemdUnit checks deploy/trident.service"},

	// clustering.md
	{pattern: `^trident --data-dir d0 --cluster-node-name`, mode: modeFlags,
		reason: "one node of three waiting for the others (the cluster tests start real 3-node clusters): its flags are parsed"},

	// performance.md: benchmarks run for minutes under full load
	{pattern: `^make bench`, mode: modeMakeDry, reason: "a benchmark (minutes at full load): make -n, the target must exist"},
	{pattern: `^go run \./cmd/tridentbench -h$`},
	{pattern: `^tridentbench `, mode: modeFlags, names: regexp.MustCompile(`--scenarios[= ](\S+)`), reason: "a benchmark (minutes at full load, some against RabbitMQ or Mosquitto started by hand): its flags are parsed"},
}

// docPortSubst maps the documented default addresses in client commands to
// the test broker's (see docEnv.subst).
var docPortSubst = []struct {
	port    string
	protKey string
}{
	{"5672", "amqp"}, {"15672", "http"}, {"61613", "stomp"}, {"1883", "mqtt"},
	{"15674", "stomp-ws"}, {"15675", "mqtt-ws"}, {"15692", "prometheus"},
}

// docEnv is what the commands of one file share: the build directory and
// the broker.
type docEnv struct {
	root   string            // module root: the commands' working directory
	bin    string            // BIN of make: trident, tridentctl, tridentbench
	tmp    string            // CURL_HOME, data directories
	ports  map[string]string // protocol → 127.0.0.1:port of the broker
	broker *docProc          // the running broker, nil until one is needed
	bg     []*docProc        // background commands of the current block
}

// docCmd is one command of a doc.
type docCmd struct {
	file string
	line int
	text string
}

func (c docCmd) String() string { return fmt.Sprintf("%s:%d: %s", c.file, c.line, c.text) }

// docBlock is one fenced block.
type docBlock struct {
	file  string
	line  int // of the opening fence
	tag   string
	lines []string
}

// docInline are the commands written inline in prose (`...`) that are
// checked too, where they stand in their file: those a reader runs as they
// are (others are synopses with placeholders: tridentctl export FILE).
var docInline = map[string][]string{
	"README.md": {
		"./bin/trident -h",
		"bin/tridentctl publish hello 'hi from tridentctl'",
		"bin/tridentctl get hello --ackmode ack_requeue_false",
	},
	"docs/configuration.md": {"trident -h"},
	"docs/operations.md":    {"trident --version", "tridentctl --version"},
}

var docInlineSpan = regexp.MustCompile("`([^`]+)`")

// docFiles returns README.md and docs/*.md, relative to root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(more)
	for _, m := range more {
		files = append(files, filepath.Join("docs", filepath.Base(m)))
	}
	return files
}

// parseBlocks returns the fenced blocks of a Markdown file.
func parseBlocks(file string, data []byte) []docBlock {
	var blocks []docBlock
	var cur *docBlock
	var fence string
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if cur == nil {
			if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
				fence = trimmed[:3]
				cur = &docBlock{file: file, line: i + 1, tag: strings.TrimSpace(trimmed[3:])}
				continue
			}
			for _, m := range docInlineSpan.FindAllStringSubmatch(line, -1) {
				if slices.Contains(docInline[file], m[1]) {
					blocks = append(blocks, docBlock{file: file, line: i, tag: "inline", lines: []string{m[1]}})
				}
			}
			continue
		}
		if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(trimmed[3:]) == "" {
			blocks = append(blocks, *cur)
			cur = nil
			continue
		}
		cur.lines = append(cur.lines, line)
	}
	if cur != nil {
		blocks = append(blocks, *cur)
	}
	return blocks
}

// commands splits a shell block into command lines: continuations (a
// trailing backslash) joined, comment lines and trailing comments dropped.
// In a console block only lines after a "$ " prompt are commands (the
// others are their output, not compared: ids and ports differ).
func (b docBlock) commands() []docCmd {
	var cmds []docCmd
	var acc strings.Builder
	start := 0
	console := strings.HasPrefix(b.tag, "console")
	for i, line := range b.lines {
		n := b.line + 1 + i
		if acc.Len() == 0 {
			if console { // "$ command", then its output
				var ok bool
				if line, ok = strings.CutPrefix(line, "$ "); !ok {
					continue
				}
			}
			if strings.HasPrefix(strings.TrimSpace(line), "#") || strings.TrimSpace(line) == "" {
				continue
			}
			start = n
		}
		if strings.HasSuffix(line, "\\") {
			acc.WriteString(strings.TrimSuffix(line, "\\"))
			continue
		}
		acc.WriteString(line)
		cmds = append(cmds, docCmd{file: b.file, line: start, text: strings.TrimSpace(stripComment(acc.String()))})
		acc.Reset()
	}
	return cmds
}

// stripComment drops a trailing " # comment" outside quotes.
func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && i > 0 && (s[i-1] == ' ' || s[i-1] == '\t'):
			return strings.TrimRight(s[:i], " \t")
		}
	}
	return s
}

func TestDocsCommands(t *testing.T) {
	root, err := testbin.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	rules := make([]*regexp.Regexp, len(docRules))
	for i, r := range docRules {
		rules[i] = regexp.MustCompile(r.pattern)
		if r.mode != modeRun && r.reason == "" {
			t.Fatalf("docRules[%d] %q: a command not run as written needs its reason", i, r.pattern)
		}
		if r.mode == modeUntilStop && r.ready == nil {
			t.Fatalf("docRules[%d] %q: a command that runs until interrupted needs ready", i, r.pattern)
		}
	}
	used := make([]bool, len(docRules))
	inlineSeen := map[string]bool{}
	docTools(t)

	bin := t.TempDir()
	e := &docEnv{root: root, bin: bin, tmp: t.TempDir()}
	if err := os.WriteFile(filepath.Join(e.tmp, ".curlrc"), []byte("fail\nsilent\nshow-error\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The binaries the docs name: make build, as make run does it, and tridentbench.
	docMust(t, e, "make build", 5*time.Minute)
	docMust(t, e, "go build -o "+filepath.Join(bin, "tridentbench")+" ./cmd/tridentbench", 5*time.Minute)

	files := docFiles(t, root)
	ran := 0 // files checked: -run may select some
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(file, func(t *testing.T) {
			ran++
			e.ports = nil
			defer e.stopBroker(t)
			for _, b := range parseBlocks(file, data) {
				where := fmt.Sprintf("%s:%d", b.file, b.line)
				switch tag, _, _ := strings.Cut(b.tag, " "); tag {
				case "sh", "bash", "shell", "console", "inline":
					if b.tag == "inline" {
						inlineSeen[b.file+"\x00"+b.lines[0]] = true
					}
					for _, c := range b.commands() {
						i := matchRule(rules, c.text)
						if i >= 0 {
							used[i] = true
						}
						rule := docRule{}
						if i >= 0 {
							rule = docRules[i]
						}
						e.check(t, c, rule)
					}
					e.stopBackground(t)
				case "yaml":
					checkDocYAML(t, b, strings.Join(b.lines, "\n"))
				case "json":
					if !json.Valid([]byte(strings.Join(b.lines, "\n"))) {
						t.Errorf("%s: the json block does not parse (tag it text if it is a schema)", where)
					}
				case "text":
				case "":
					t.Errorf("%s: a fenced block without a tag: sh (run by this check), yaml, json or text (not a command)", where)
				default:
					t.Errorf("%s: fenced block tagged %q: this check knows sh, bash, shell, console, yaml, json and text", where, b.tag)
				}
			}
		})
	}
	if !t.Failed() && ran == len(files) {
		for file, cmds := range docInline {
			for _, c := range cmds {
				if !inlineSeen[file+"\x00"+c] {
					t.Errorf("docInline: %s has no `%s`: remove it", file, c)
				}
			}
		}
		for i, u := range used {
			if !u {
				t.Errorf("docRules[%d] %q matches no command of the docs: remove it", i, docRules[i].pattern)
			}
		}
	}
}

// docToolPackages are the programs the docs' commands run, with the Debian
// package of each (scripts/test-deps.sh installs them).
var docToolPackages = map[string]string{
	"curl": "curl", "socat": "socat", "make": "make",
	"mosquitto_pub": "mosquitto-clients", "mosquitto_sub": "mosquitto-clients",
	"amqp-publish": "amqp-tools", "amqp-get": "amqp-tools",
}

// docTools fails the test when a program the docs use is missing (skips
// it under TRIDENT_TEST_DEPS=skip, saying so), rather than have each of
// its commands fail on its own.
func docTools(t *testing.T) {
	t.Helper()
	var missing, pkgs []string
	for tool, pkg := range docToolPackages {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
			if !slices.Contains(pkgs, pkg) {
				pkgs = append(pkgs, pkg)
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	sort.Strings(missing)
	sort.Strings(pkgs)
	msg := fmt.Sprintf("the docs' commands need %s: apt-get install %s (scripts/test-deps.sh)", strings.Join(missing, ", "), strings.Join(pkgs, " "))
	if os.Getenv("TRIDENT_TEST_DEPS") == "skip" {
		t.Skip(msg + "; SKIPPED (TRIDENT_TEST_DEPS=skip)")
	}
	t.Fatal(msg)
}

func matchRule(rules []*regexp.Regexp, cmd string) int {
	for i, re := range rules {
		if re.MatchString(cmd) {
			return i
		}
	}
	return -1
}

// docMust runs a setup step of the check itself (not a doc command).
func docMust(t *testing.T, e *docEnv, cmd string, timeout time.Duration) {
	t.Helper()
	out, err := e.runShell(cmd, nil, timeout)
	if err != nil {
		t.Fatalf("setup %q: %v\n%s", cmd, err, out)
	}
}

// environ is the environment of every command: PATH with BIN first, make's
// BIN, curl's config, tridentctl's URL and the broker's listeners.
func (e *docEnv) environ(extra []string) []string {
	env := []string{
		"PATH=" + e.bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"MAKEFLAGS=BIN=" + e.bin,
		"CURL_HOME=" + e.tmp,
	}
	if h := e.ports["http"]; h != "" {
		env = append(env, "TRIDENT_URL=http://"+h)
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "MAKEFLAGS" || k == "MAKELEVEL" || k == "MFLAGS" || strings.HasPrefix(k, "TRIDENT_") || k == "CURL_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// runShell runs cmd with bash to completion or timeout.
func (e *docEnv) runShell(cmd string, extra []string, timeout time.Duration) (string, error) {
	p, err := e.start(cmd, extra)
	if err != nil {
		return "", err
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return p.output(), fmt.Errorf("still running after %v (killed)", timeout)
	}
	return p.output(), p.err
}

// docProc is a command started in its own process group.
type docProc struct {
	cmd  *exec.Cmd
	text string // file:line: command, for errors
	want string // a background command must print this before it is stopped
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *docProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *docProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *docProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill ends the process group: SIGTERM, then SIGKILL after 15s.
func (p *docProc) kill() {
	if !p.running() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (e *docEnv) start(cmd string, extra []string) (*docProc, error) {
	p := &docProc{text: cmd, done: make(chan struct{})}
	p.cmd = exec.Command("bash", "-o", "pipefail", "-c", cmd)
	p.cmd.Dir = e.root
	p.cmd.Env = e.environ(extra)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// listenEnv gives every listener of a broker a free loopback port and a
// fresh data directory, and returns the environment and the addresses.
func (e *docEnv) listenEnv(t *testing.T) ([]string, map[string]string) {
	t.Helper()
	ports := map[string]string{}
	env := []string{"TRIDENT_DATA_DIR=" + filepath.Join(t.TempDir(), "data")}
	for _, l := range []struct{ key, env string }{
		{"amqp", "TRIDENT_AMQP_LISTEN"}, {"mqtt", "TRIDENT_MQTT_LISTEN"}, {"mqtt-ws", "TRIDENT_MQTT_WS_LISTEN"},
		{"stomp", "TRIDENT_STOMP_LISTEN"}, {"stomp-ws", "TRIDENT_STOMP_WS_LISTEN"}, {"stream", "TRIDENT_STREAM_LISTEN"},
		{"http", "TRIDENT_HTTP_LISTEN"}, {"prometheus", "TRIDENT_PROMETHEUS_LISTEN"},
	} {
		port, err := testbin.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[l.key] = "127.0.0.1:" + strconv.Itoa(port)
		env = append(env, l.env+"="+ports[l.key])
	}
	return env, ports
}

var (
	docLocalAddr  = regexp.MustCompile(`\b(localhost|127\.0\.0\.1):([0-9]+)\b`)
	docMosquittoH = regexp.MustCompile(`^(mosquitto_(pub|sub)\b.*?)-h localhost\b`)
	docBinDir     = regexp.MustCompile(`(^|[\s|;&(])(\./)?bin/`)
)

// subst maps a client command's documented addresses to the broker's, and
// bin/ to the build directory.
func (e *docEnv) subst(cmd string) string {
	cmd = docBinDir.ReplaceAllString(cmd, "${1}"+e.bin+"/")
	if e.ports == nil {
		return cmd
	}
	cmd = docLocalAddr.ReplaceAllStringFunc(cmd, func(m string) string {
		port := m[strings.LastIndex(m, ":")+1:]
		for _, s := range docPortSubst {
			if s.port == port {
				return e.ports[s.protKey]
			}
		}
		return m
	})
	return docMosquittoH.ReplaceAllString(cmd, "${1}-h 127.0.0.1 -p "+docPort(e.ports["mqtt"]))
}

func docPort(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

// unmapped reports an address left to a default a client command would
// reach: localhost (a default port, or one docPortSubst lacks), a loopback
// port not the broker's, or a mosquitto client without -p.
func (e *docEnv) unmapped(cmd string) error {
	if strings.Contains(cmd, "localhost") {
		return fmt.Errorf("localhost with a port docPortSubst does not map, or none")
	}
	for _, m := range docLocalAddr.FindAllString(cmd, -1) {
		if !slices.Contains(slices.Collect(maps.Values(e.ports)), m) {
			return fmt.Errorf("%s is not one of the broker's addresses", m)
		}
	}
	if strings.HasPrefix(cmd, "mosquitto_") && !strings.Contains(cmd, " -p ") {
		return fmt.Errorf("a mosquitto client without -h localhost, so without the broker's port")
	}
	return nil
}

// ensureBroker starts bin/trident for client commands of a file that started none.
func (e *docEnv) ensureBroker(t *testing.T) {
	t.Helper()
	if e.broker != nil {
		return
	}
	env, ports := e.listenEnv(t)
	p, err := e.start(filepath.Join(e.bin, "trident"), env)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitListen(p, ports["amqp"]); err != nil {
		p.kill()
		t.Fatalf("the check's broker: %v\n%s", err, p.output())
	}
	e.broker, e.ports = p, ports
}

func (e *docEnv) stopBroker(t *testing.T) {
	e.stopBackground(t)
	if e.broker != nil {
		e.broker.kill()
		e.broker = nil
	}
	e.ports = nil
}

// waitListen waits until addr accepts a connection while p runs.
func waitListen(p *docProc, addr string) error {
	deadline := time.Now().Add(3 * time.Minute) // make run may build first
	for time.Now().Before(deadline) {
		if !p.running() {
			return fmt.Errorf("exited (%v) before listening on %s", p.err, addr)
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not listening on %s after 3m", addr)
}

// check runs one command as its rule says.
func (e *docEnv) check(t *testing.T, c docCmd, rule docRule) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s\n\t%s", c, fmt.Sprintf(format, args...))
	}
	t.Logf("%s\n\t%s", c, docModeNames[rule.mode])
	switch rule.mode {
	case modeSkip:
		t.Logf("\tbecause %s", rule.reason)
		return
	case modeMakeDry:
		cmd := strings.Replace(c.text, "make ", "make -n ", 1)
		if out, err := e.runShell(cmd, nil, docCmdTimeout); err != nil {
			fail("as %q: %v\n%s", cmd, err, out)
		}
		return
	case modeFlags:
		cmd := e.subst(c.text) + " -h"
		out, err := e.runShell(cmd, nil, docCmdTimeout)
		if err != nil {
			fail("its flags do not parse (run as %q): %v\n%s", cmd, err, docTail(out))
			return
		}
		if rule.names != nil {
			if m := rule.names.FindStringSubmatch(c.text); m != nil {
				for _, name := range strings.Split(m[1], ",") {
					if !regexp.MustCompile(`(^|[\s,(])` + regexp.QuoteMeta(name) + `($|[\s,)])`).MatchString(out) {
						fail("%q is not one of the names its -h lists", name)
					}
				}
			}
		}
		return
	case modeServer:
		env, ports := e.listenEnv(t)
		cmd := c.text
		// Documented 127.0.0.1:PORT flags get free ports too.
		mapped := map[string]string{}
		cmd = docLocalAddr.ReplaceAllStringFunc(cmd, func(m string) string {
			if mapped[m] == "" {
				port, err := testbin.FreePort()
				if err != nil {
					t.Fatal(err)
				}
				mapped[m] = "127.0.0.1:" + strconv.Itoa(port)
			}
			return mapped[m]
		})
		amqpAddr := ports["amqp"]
		if m := regexp.MustCompile(`--amqp-listen (\S+)`).FindStringSubmatch(cmd); m != nil {
			amqpAddr = m[1]
		}
		p, err := e.start(cmd, env)
		if err != nil {
			fail("%v", err)
			return
		}
		if err := waitListen(p, amqpAddr); err != nil {
			p.kill()
			fail("run as %q: %v\n%s", cmd, err, docTail(p.output()))
			return
		}
		if rule.jsonLog {
			checkJSONLog(t, c, p)
		}
		if rule.keep {
			e.stopBroker(t)
			e.broker, e.ports = p, ports
			return
		}
		p.kill()
		return
	}

	// A client command: against the file's broker.
	e.ensureBroker(t)
	cmd := e.subst(c.text)
	if err := e.unmapped(cmd); err != nil {
		fail("%v (run as %q would reach whatever listens on this machine, not the check's broker)", err, cmd)
		return
	}
	switch rule.mode {
	case modeBackground:
		cmd = strings.TrimSpace(strings.TrimSuffix(cmd, "&"))
		p, err := e.start(cmd, nil)
		if err != nil {
			fail("%v", err)
			return
		}
		e.bg = append(e.bg, p)
		if rule.ready != nil {
			rule.ready(t, e)
		}
		p.text, p.want = c.String(), rule.want // checked when the block ends (stopBackground)
		return
	case modeUntilStop:
		p, err := e.start(cmd, nil)
		if err != nil {
			fail("%v", err)
			return
		}
		rule.ready(t, e)
		running := p.running()
		p.kill()
		if !running {
			fail("exited (%v) where it should run until interrupted (run as %q)\n%s", p.err, cmd, docTail(p.output()))
		}
		return
	}
	out, err := e.runShell(cmd, nil, docCmdTimeout)
	if err != nil {
		fail("run as %q: %v\n%s", cmd, err, docTail(out))
		return
	}
	if rule.want != "" && !strings.Contains(out, rule.want) {
		fail("output lacks %q (run as %q)\n%s", rule.want, cmd, docTail(out))
	}
}

// stopBackground stops the block's background commands, after giving each
// up to 10s to print what it must.
func (e *docEnv) stopBackground(t *testing.T) {
	t.Helper()
	for _, p := range e.bg {
		want := p.want
		deadline := time.Now().Add(10 * time.Second)
		for want != "" && p.running() && !strings.Contains(p.output(), want) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		running := p.running()
		p.kill()
		switch {
		case !running:
			t.Errorf("%s\n\texited (%v) while the next commands of its block ran\n%s", p.text, p.err, docTail(p.output()))
		case want != "" && !strings.Contains(p.output(), want):
			t.Errorf("%s\n\tprinted no %q\n%s", p.text, want, docTail(p.output()))
		}
	}
	e.bg = nil
}

// waitBinding waits until exchange has a binding with key (a subscriber
// started in the background has subscribed).
func waitBinding(exchange, key string) func(t *testing.T, e *docEnv) {
	return func(t *testing.T, e *docEnv) {
		t.Helper()
		url := "http://" + e.ports["http"] + "/api/exchanges/%2F/" + exchange + "/bindings/source"
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			out, err := exec.Command("curl", "-sf", "-u", "guest:guest", url).Output()
			if err == nil && strings.Contains(string(out), `"routing_key":"`+key+`"`) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("no binding %q on %s after 30s", key, exchange)
	}
}

// checkJSONLog checks that a broker started with TRIDENT_LOG_FORMAT=json
// logs JSON lines.
func checkJSONLog(t *testing.T, c docCmd, p *docProc) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(p.output()))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "{") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("%s\n\tlog line is not JSON: %q", c, line)
			}
			return
		}
	}
	t.Errorf("%s\n\tno JSON log line\n%s", c, docTail(p.output()))
}

func docTail(s string) string {
	const max = 2000
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	return s
}

// checkDocYAML loads a YAML block: a Kubernetes env list must name only
// variables trident reads; anything else is a trident config file, loaded
// with conf.Load (unknown keys and wrong types fail). The block that lists
// every key with its default must equal conf.Default().
func checkDocYAML(t *testing.T, b docBlock, body string) {
	t.Helper()
	where := fmt.Sprintf("%s:%d", b.file, b.line)
	// conf names lines of the block: name them in the doc.
	docLines := func(msg string) string {
		return docYAMLLine.ReplaceAllStringFunc(msg, func(m string) string {
			n, _ := strconv.Atoi(docYAMLLine.FindStringSubmatch(m)[1])
			return fmt.Sprintf("(%s:%d)", b.file, b.line+n)
		})
	}
	var top map[string]any
	if err := yaml.Unmarshal([]byte(body), &top); err != nil {
		t.Errorf("%s: the yaml block does not parse: %v", where, err)
		return
	}
	if env, ok := top["env"]; ok && len(top) == 1 {
		var usage bytes.Buffer
		conf.Usage(&usage)
		list, _ := env.([]any)
		for _, item := range list {
			m, _ := item.(map[string]any)
			name, _ := m["name"].(string)
			if strings.HasPrefix(name, "TRIDENT_") && !regexp.MustCompile(`\b`+name+`\b`).Match(usage.Bytes()) {
				t.Errorf("%s: %s is not a variable trident reads (trident -h lists them)", where, name)
			}
		}
		return
	}
	// The node name's documented default is a placeholder for the host's.
	body = strings.Replace(body, "node_name: trident@<hostname>", "node_name: "+conf.Default().Cluster.NodeName, 1)
	path := filepath.Join(t.TempDir(), "trident.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := conf.Load([]string{"--config", path}, nil)
	if err != nil {
		if strings.Contains(err.Error(), "config file") {
			t.Errorf("%s: conf.Load refuses the yaml block:\n%s", where, docLines(err.Error()))
			return
		}
		// A fragment naming files this machine lacks fails validation,
		// not loading: the keys and types are right.
		t.Logf("%s: loads; validation on this machine: %v", where, err)
		return
	}
	t.Logf("%s: loaded by conf.Load", where)
	if strings.Contains(body, "every key, with its default") {
		want, _ := yaml.Marshal(conf.Default())
		got, _ := yaml.Marshal(cfg)
		if !bytes.Equal(want, got) {
			t.Errorf("%s: the block of every key with its default differs from conf.Default():\n%s", where, lineDiff(string(want), string(got)))
		}
	}
}

var docYAMLLine = regexp.MustCompile(`\(line ([0-9]+)\)`)

// lineDiff lists the lines of a and b that the other lacks.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			out = append(out, "  default: "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			out = append(out, "  doc:     "+l)
		}
	}
	return strings.Join(out, "\n")
}
