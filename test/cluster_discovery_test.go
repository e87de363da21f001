package test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/test/testbin"
)

// The multi-process discovery test re-runs this test binary as the member
// processes: with discoveryHelperEnv set, TestClusterDiscoveryHelperProcess
// runs one discovery.Membership and prints the membership it sees.
const discoveryHelperEnv = "TRIDENT_DISCOVERY_HELPER"

// TestClusterDiscoveryProcesses: three member processes on 127.0.0.1 find
// each other through one seed; one is killed with SIGKILL and the other two
// declare it dead; it restarts with the same name and port and all three
// see each other alive again.
func TestClusterDiscoveryProcesses(t *testing.T) {
	if os.Getenv(discoveryHelperEnv) != "" {
		t.Skip("inside a helper process")
	}
	if testing.Short() {
		t.Skip("multi-process test")
	}
	var ports []int
	for range 3 {
		ports = append(ports, freeTCPUDPPort(t))
	}
	seed := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	procs := make([]*memberProc, 3)
	for i := range procs {
		procs[i] = startMemberProc(t, fmt.Sprintf("node%d", i), ports[i], seed)
	}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()

	all := "node0=alive,node1=alive,node2=alive"
	for _, p := range procs {
		p.waitView(t, all, 10*time.Second)
	}

	killed := time.Now()
	procs[2].kill()
	for _, p := range procs[:2] {
		p.waitView(t, "node0=alive,node1=alive,node2=dead", 10*time.Second)
	}
	t.Logf("SIGKILLed node2 declared dead by both peers after %v", time.Since(killed).Round(time.Millisecond))

	restarted := time.Now()
	procs[2] = startMemberProc(t, "node2", ports[2], seed)
	for _, p := range procs {
		p.waitView(t, all, 10*time.Second)
	}
	t.Logf("restarted node2 seen alive by all after %v", time.Since(restarted).Round(time.Millisecond))
}

// memberProc is one helper process and the last membership line it printed.
type memberProc struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser

	mu   sync.Mutex
	view string
	done chan struct{}
}

func startMemberProc(t *testing.T, name string, port int, seed string) *memberProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterDiscoveryHelperProcess$")
	cmd.Env = append(os.Environ(),
		discoveryHelperEnv+"=1",
		"TRIDENT_DISCOVERY_NAME="+name,
		"TRIDENT_DISCOVERY_PORT="+strconv.Itoa(port),
		"TRIDENT_DISCOVERY_JOIN="+seed,
	)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &memberProc{name: name, cmd: cmd, in: in, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "members: "); ok {
				p.mu.Lock()
				p.view = v
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *memberProc) waitView(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		v := p.view
		p.mu.Unlock()
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s sees %q, want %q", p.name, v, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and reaps the process.
func (p *memberProc) kill() {
	p.cmd.Process.Kill()
	<-p.done
	p.cmd.Wait()
}

// stop closes the helper's stdin (it then leaves and exits), killing it
// if it has not exited within a few seconds.
func (p *memberProc) stop() {
	p.in.Close()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd.Wait()
}

func freeTCPUDPPort(t *testing.T) int {
	t.Helper()
	p, err := testbin.FreeTCPUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClusterDiscoveryHelperProcess is a member process of
// TestClusterDiscoveryProcesses; it skips unless started by it. It prints
// "members: name=status,..." whenever its view changes, leaves and exits
// when its stdin closes, and exits by itself after a minute.
func TestClusterDiscoveryHelperProcess(t *testing.T) {
	if os.Getenv(discoveryHelperEnv) == "" {
		t.Skip("helper process for TestClusterDiscoveryProcesses")
	}
	port, _ := strconv.Atoi(os.Getenv("TRIDENT_DISCOVERY_PORT"))
	name := os.Getenv("TRIDENT_DISCOVERY_NAME")
	ml := memberlist.DefaultLocalConfig()
	ml.ProbeInterval = 100 * time.Millisecond
	ml.ProbeTimeout = 50 * time.Millisecond
	ml.GossipInterval = 20 * time.Millisecond
	ml.PushPullInterval = time.Second
	ml.SuspicionMult = 2
	ml.TCPTimeout = 500 * time.Millisecond
	cfg := discovery.Config{
		NodeName:          name,
		BindAddr:          "127.0.0.1",
		BindPort:          port,
		RetryJoinInterval: 200 * time.Millisecond,
		Meta:              map[string]string{"raft": net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1))},
		Memberlist:        ml,
	}
	if seed := os.Getenv("TRIDENT_DISCOVERY_JOIN"); seed != "" {
		cfg.Join = []string{seed}
	}
	var log *slog.Logger // nil discards; TRIDENT_TEST_LOG shows it, as for brokers
	if os.Getenv("TRIDENT_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := discovery.Start(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	stdinClosed := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lifetime := time.After(time.Minute)
	last := ""
	for {
		select {
		case <-stdinClosed:
			m.Leave(time.Second)
			m.Shutdown()
			os.Exit(0)
		case <-lifetime:
			m.Shutdown()
			os.Exit(0)
		case <-tick.C:
		}
		var parts []string
		for _, mb := range m.Members() {
			parts = append(parts, mb.Name+"="+mb.Status.String())
		}
		sort.Strings(parts)
		if v := strings.Join(parts, ","); v != last {
			fmt.Printf("members: %s\n", v)
			last = v
		}
	}
}
