// Package testbin builds the trident binary and runs it on free loopback ports
// for black-box tests and the bench command: build, start, wait until the AMQP
// port answers, stop (SIGTERM), kill (SIGKILL), restart on the same ports and
// data directory.
//
// Tests use Start, which ties the process to a testing.TB. Programs (the bench
// command) use Build and Launch.
//
// The flags passed to trident are those of the conf package:
//
//	--data-dir DIR --amqp-listen 127.0.0.1:PORT --http-listen "" --mqtt-listen ""
//	--stomp-listen "" --stomp-ws-listen "" --stream-listen "" --stream-tls-listen "" --prometheus-listen ""
//
// followed by any extra arguments, which may override them (the last flag wins).
// Set TRIDENT_BIN to use a prebuilt binary instead of building ./cmd/trident.
package testbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ModulePath is the module whose ./cmd/trident is built.
const ModulePath = "github.com/trident-broker/trident"

// ErrNotRunning is returned by Stop and Kill when the process is not running.
var ErrNotRunning = errors.New("testbin: trident is not running")

// Options configures Launch.
type Options struct {
	// Binary is the trident executable. Empty means $TRIDENT_BIN, or else
	// build ./cmd/trident with Build into a temporary directory.
	Binary string
	// DataDir is passed as --data-dir. Empty means a new temporary directory
	// that Proc.Cleanup removes.
	DataDir string
	// ExtraArgs are appended after the default flags.
	ExtraArgs []string
	// Log receives the process's stdout and stderr. Nil means a file
	// trident.log beside the data directory (see Proc.LogPath).
	Log io.Writer
	// StartTimeout bounds the wait for the AMQP port (default 30s).
	StartTimeout time.Duration
	// StopTimeout bounds the wait after SIGTERM before SIGQUIT (a goroutine
	// dump in the error) and SIGKILL (default 15s).
	StopTimeout time.Duration
}

// Proc is a running (or stopped) trident process.
type Proc struct {
	// AMQPURL is amqp://guest:guest@127.0.0.1:PORT/.
	AMQPURL string
	// AMQPAddr is 127.0.0.1:PORT.
	AMQPAddr string
	// DataDir is the directory passed as --data-dir.
	DataDir string
	// Binary is the executable that runs.
	Binary string
	// LogPath is the file holding the process output ("" when Options.Log was set).
	LogPath string

	opts    Options
	args    []string
	tmpDirs []string
	logFile *os.File
	tb      testing.TB

	mu  sync.Mutex
	cur *run // the running process, nil when stopped
}

// run is one execution of the binary.
type run struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // cmd.Wait's result, valid once done is closed
}

// FindModuleRoot returns the directory of the go.mod of ModulePath, searching
// from the working directory upwards.
func FindModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module "+ModulePath)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testbin: no go.mod of %s above the working directory", ModulePath)
		}
		dir = parent
	}
}

// Build compiles ./cmd/trident of the module into dir and returns the path of
// the executable.
func Build(ctx context.Context, dir string) (string, error) {
	root, err := FindModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "trident")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/trident")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testbin: go build ./cmd/trident: %v\n%s", err, b)
	}
	return out, nil
}

// handedOut are the ports FreePort and FreeTCPUDPPort returned in this
// process: the kernel may offer a port again as soon as the probe closes,
// and two picks of one port (node 1's Raft port and node 2's HTTP port)
// make one start fail, or worse, one node answer for another.
var (
	handedMu  sync.Mutex
	handedOut = map[int]bool{}
)

// claim records port as handed out; false if it was already.
func claim(port int) bool {
	handedMu.Lock()
	defer handedMu.Unlock()
	if handedOut[port] {
		return false
	}
	handedOut[port] = true
	return true
}

// FreePort returns a loopback TCP port that was free a moment ago and that
// this process has not been given before.
func FreePort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if claim(port) {
			return port, nil
		}
	}
	return 0, errors.New("testbin: no free port not handed out before")
}

// FreeTCPUDPPort returns a loopback port free a moment ago for both TCP
// and UDP (gossip binds both), not handed out before.
func FreeTCPUDPPort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			if claim(port) {
				return port, nil
			}
		}
	}
	return 0, errors.New("testbin: no port free for both TCP and UDP")
}

// Launch starts trident and waits until its AMQP port accepts connections.
// The caller must call Stop or Kill, then Cleanup.
func Launch(ctx context.Context, opts Options) (*Proc, error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 15 * time.Second
	}
	p := &Proc{opts: opts}
	ok := false
	defer func() {
		if !ok {
			p.Cleanup()
		}
	}()

	p.Binary = opts.Binary
	if p.Binary == "" {
		p.Binary = os.Getenv("TRIDENT_BIN")
	}
	if p.Binary == "" {
		dir, err := p.tempDir("trident-bin-")
		if err != nil {
			return nil, err
		}
		if p.Binary, err = Build(ctx, dir); err != nil {
			return nil, err
		}
	}
	p.DataDir = opts.DataDir
	if p.DataDir == "" {
		dir, err := p.tempDir("trident-data-")
		if err != nil {
			return nil, err
		}
		p.DataDir = filepath.Join(dir, "data")
	}
	if opts.Log == nil {
		p.LogPath = filepath.Join(filepath.Dir(p.DataDir), "trident.log")
		f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644) // read by waitStarted
		if err != nil {
			return nil, err
		}
		p.logFile = f
	}
	// A free port is only free until someone takes it: a caller's own
	// ports (ExtraArgs) or a parallel test may land on the one picked
	// here. Such a start is retried on another port.
	for attempt := 0; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		p.AMQPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p.AMQPURL = "amqp://guest:guest@" + p.AMQPAddr + "/"
		p.args = append([]string{
			"--data-dir", p.DataDir,
			"--amqp-listen", p.AMQPAddr,
			"--http-listen", "",
			"--mqtt-listen", "",
			"--mqtt-ws-listen", "",
			"--stomp-listen", "",
			"--stomp-ws-listen", "",
			"--stream-listen", "",
			"--stream-tls-listen", "",
			"--prometheus-listen", "",
		}, opts.ExtraArgs...)
		err = p.start(ctx)
		if err == nil {
			break
		}
		if tail := p.logTail(); attempt < 3 && strings.Contains(tail, "port "+strconv.Itoa(port)+" is also used by") {
			continue
		}
		return nil, err
	}
	ok = true
	return p, nil
}

func (p *Proc) tempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	p.tmpDirs = append(p.tmpDirs, dir)
	return dir, nil
}

func (p *Proc) output() io.Writer {
	if p.opts.Log != nil {
		return p.opts.Log
	}
	return p.logFile
}

func (p *Proc) start(ctx context.Context) error {
	p.mu.Lock()
	if p.cur != nil {
		p.mu.Unlock()
		return errors.New("testbin: trident is already running")
	}
	var logFrom int64 // where this run's log starts
	if p.opts.Log == nil && p.logFile != nil {
		if fi, err := p.logFile.Stat(); err == nil {
			logFrom = fi.Size()
		}
	}
	cmd := exec.Command(p.Binary, disableArgs(p.Binary, p.args)...)
	cmd.Stdout = p.output()
	cmd.Stderr = p.output()
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("testbin: start %s: %w", p.Binary, err)
	}
	r := &run{cmd: cmd, done: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	p.cur = r
	p.mu.Unlock()

	deadline := time.Now().Add(p.opts.StartTimeout)
	for {
		c, err := net.DialTimeout("tcp", p.AMQPAddr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			p.waitStarted(r, logFrom, deadline)
			return nil
		}
		select {
		case <-r.done:
			p.clear(r)
			return fmt.Errorf("testbin: trident exited before listening on %s: %v%s", p.AMQPAddr, r.err, p.logTail())
		case <-ctx.Done():
			p.kill(r)
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill(r)
			return fmt.Errorf("testbin: trident did not listen on %s within %v%s", p.AMQPAddr, p.opts.StartTimeout, p.logTail())
		}
	}
}

// waitStarted waits (until deadline) for the run's "trident started" log
// line, written once node.Start has opened every listener: the AMQP
// port accepts before the others (HTTP, MQTT …) are open, so a test that
// went on when it accepted could find the management API not listening
// yet. Without a log file of its own (Options.Log) it does not wait.
func (p *Proc) waitStarted(r *run, from int64, deadline time.Time) {
	if p.opts.Log != nil || p.logFile == nil {
		return
	}
	buf := make([]byte, 64<<10)
	for time.Now().Before(deadline) {
		n, _ := p.logFile.ReadAt(buf, from)
		if bytes.Contains(buf[:n], []byte("trident started")) {
			return
		}
		if n == len(buf) {
			from += int64(n) - 64 // a long log: read on, keeping a line's overlap
			continue
		}
		select {
		case <-r.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// current returns the running process, or nil.
func (p *Proc) current() *run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// clear forgets r if it is still the current process.
func (p *Proc) clear(r *run) {
	p.mu.Lock()
	if p.cur == r {
		p.cur = nil
	}
	p.mu.Unlock()
}

// kill sends SIGKILL to r and waits for its exit.
func (p *Proc) kill(r *run) {
	_ = r.cmd.Process.Kill()
	<-r.done
	p.clear(r)
}

// logTail returns the last lines of the log file, for error messages.
func (p *Proc) logTail() string {
	if p.LogPath == "" {
		return ""
	}
	b, err := os.ReadFile(p.LogPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return "\n--- tail of " + p.LogPath + " ---\n" + strings.TrimRight(string(b), "\n")
}

// Pid is the running process's id, 0 when it is not running.
func (p *Proc) Pid() int {
	if r := p.current(); r != nil && r.cmd.Process != nil {
		return r.cmd.Process.Pid
	}
	return 0
}

// Running reports whether the process is running.
func (p *Proc) Running() bool { return p.current() != nil }

// Stop sends SIGTERM and waits for the exit; after StopTimeout it sends SIGKILL
// and returns an error. An exit status other than 0 is an error too.
// A Proc from Start fails its test on error.
func (p *Proc) Stop() error {
	err := p.stop()
	p.report("Stop", err)
	return err
}

func (p *Proc) stop() error {
	r := p.current()
	if r == nil {
		return ErrNotRunning
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
		p.clear(r)
		if r.err != nil {
			return fmt.Errorf("testbin: trident exited after SIGTERM: %v%s", r.err, p.logTail())
		}
		return nil
	case <-time.After(p.opts.StopTimeout):
		// SIGQUIT: the Go runtime writes every goroutine's stack to the
		// log and exits, which says where the shutdown hangs.
		_ = r.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-r.done:
			p.clear(r)
		case <-time.After(5 * time.Second):
			p.kill(r)
		}
		return fmt.Errorf("testbin: trident did not exit within %v of SIGTERM; SIGQUIT%s", p.opts.StopTimeout, p.stacks())
	}
}

// stacks is the goroutine dump a SIGQUIT wrote to the log (at most 256
// KiB of it), or the log's tail if there is none.
func (p *Proc) stacks() string {
	if p.LogPath == "" {
		return ""
	}
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	i := strings.LastIndex(string(b), "SIGQUIT: quit")
	if i < 0 {
		return p.logTail()
	}
	b = b[i:]
	if len(b) > 256<<10 {
		b = b[:256<<10]
	}
	return "\n--- goroutines at SIGQUIT (" + p.LogPath + ") ---\n" + string(b)
}

// Kill sends SIGKILL and waits for the exit.
// A Proc from Start fails its test on error.
func (p *Proc) Kill() error {
	r := p.current()
	if r == nil {
		p.report("Kill", ErrNotRunning)
		return ErrNotRunning
	}
	p.kill(r)
	return nil
}

// Restart stops the process if it is running (SIGTERM) and starts it again with
// the same arguments, ports and data directory.
// A Proc from Start fails its test on error.
func (p *Proc) Restart() error {
	var err error
	if p.Running() {
		err = p.stop()
	}
	if err == nil {
		err = p.start(context.Background())
	}
	p.report("Restart", err)
	return err
}

// Cleanup kills the process if it still runs and removes the temporary
// directories Launch created (binary, data directory, log).
func (p *Proc) Cleanup() {
	if r := p.current(); r != nil {
		p.kill(r)
	}
	if p.logFile != nil {
		p.logFile.Close()
		p.logFile = nil
	}
	for _, d := range p.tmpDirs {
		os.RemoveAll(d)
	}
	p.tmpDirs = nil
}

func (p *Proc) report(op string, err error) {
	if err != nil && p.tb != nil {
		p.tb.Helper()
		p.tb.Fatalf("testbin: %s: %v", op, err)
	}
}

// flagSets caches, per binary, the flags its -h lists.
var flagSets sync.Map // binary path → map[string]bool

// disableArgs drops from args the pairs `--flag ""` (a listener turned off)
// whose flag bin does not define: a binary of an older release (the
// rolling-upgrade test's v0.1.0) has no such listener to turn off, and
// would refuse the unknown flag. Everything else is passed as it is.
func disableArgs(bin string, args []string) []string {
	known, ok := flagSets.Load(bin)
	if !ok {
		out, _ := exec.Command(bin, "-h").CombinedOutput()
		set := map[string]bool{}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "--") {
				set[f] = true
			}
		}
		known, _ = flagSets.LoadOrStore(bin, set)
	}
	set := known.(map[string]bool)
	if len(set) == 0 { // -h printed no flags: leave args alone
		return args
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if strings.HasPrefix(args[i], "--") && !strings.Contains(args[i], "=") && i+1 < len(args) && args[i+1] == "" && !set[args[i]] {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
