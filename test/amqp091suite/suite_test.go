// Package amqp091suite runs the third-party integration suite of
// github.com/rabbitmq/amqp091-go against Trident (or any broker) through
// scripts/amqp091-suite.sh. See README.md.
package amqp091suite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/test/testbin"
)

// excluded are the suite's tests that are skipped (go test -skip), each with
// the reason. It is empty: the whole suite must pass.
var excluded = []struct{ test, reason string }{}

// brokerArgs start Trident the way the suite expects a RabbitMQ:
//   - the management API on 127.0.0.1:15672, where the connection-recovery
//     tests look up and DELETE /api/connections/{name} to break a connection
//     (the port is hard-coded in the suite's internal/utils);
//   - the AMQP "product" server property set to "RabbitMQ": three tests
//     (TestRabbitMQQueueTTLGet, TestRabbitMQQueueNackMultipleRequeue,
//     TestIntegrationRecoverNotImplemented) check the broker only when the
//     product reads RabbitMQ, and otherwise skip their checks without closing
//     their connection, which the suite's goleak check then reports. With the
//     property set they really test our x-message-ttl, nack multiple with
//     requeue and basic.recover(requeue=false) → 540.
var brokerArgs = []string{"--http-listen", "127.0.0.1:15672", "--amqp-product", "RabbitMQ"}

// skipPattern is the -skip regexp matching exactly the excluded tests.
func skipPattern() string {
	names := make([]string, len(excluded))
	for i, e := range excluded {
		names[i] = regexp.QuoteMeta(e.test)
	}
	return "^(" + strings.Join(names, "|") + ")$"
}

// TestAMQP091Suite runs the amqp091-go v1.16.0 integration suite.
//
// Environment:
//
//	TRIDENT_SUITE_URL   broker to test; unset means build and start a Trident
//	TRIDENT_SUITE_ARGS  extra go test arguments for the suite, space separated
//	                    (e.g. "-run TestIntegration" or "-race")
//	TRIDENT_SUITE_LOG   file to keep the suite's full output in
//
// The suite takes a few minutes; run it with go test -timeout 20m.
func TestAMQP091Suite(t *testing.T) {
	if testing.Short() {
		t.Skip("the amqp091-go suite takes minutes; skipped with -short")
	}
	root, err := testbin.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	url := os.Getenv("TRIDENT_SUITE_URL")
	if url == "" {
		url = testbin.Start(t, brokerArgs...).AMQPURL
	}
	for _, e := range excluded {
		t.Logf("excluded %s: %s", e.test, e.reason)
	}

	logPath := os.Getenv("TRIDENT_SUITE_LOG")
	if logPath == "" {
		logPath = filepath.Join(t.TempDir(), "amqp091-suite.log")
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	args := []string{filepath.Join(root, "scripts", "amqp091-suite.sh"), url, "-skip", skipPattern()}
	args = append(args, strings.Fields(os.Getenv("TRIDENT_SUITE_ARGS"))...)
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-10*time.Second))
		defer cancel()
		args = append(args, "-timeout", time.Until(d.Add(-15*time.Second)).Round(time.Second).String())
	}
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.WaitDelay = 5 * time.Second
	t.Logf("running %s against %s (output in %s)", "scripts/amqp091-suite.sh", url, logPath)
	start := time.Now()
	runErr := cmd.Run()
	elapsed := time.Since(start).Round(time.Second)

	out, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	sum := summarize(out)
	t.Logf("suite finished in %v: %d passed, %d failed, %d skipped", elapsed, len(sum.passed), len(sum.failed), len(sum.skipped))
	for _, name := range sum.failed {
		t.Errorf("%s failed:\n%s", name, sum.output(name, 80))
	}
	if i := bytes.Index(out, []byte("found unexpected goroutines")); i >= 0 {
		// The suite's TestMain runs goleak: every test passed but some client
		// goroutines (usually a connection the broker never finished closing)
		// were still alive at the end.
		t.Errorf("goleak (the suite's TestMain) found leaked goroutines after all tests:\n%s", head(out[i:], 60))
	} else if runErr != nil && len(sum.failed) == 0 {
		t.Errorf("suite did not pass (%v); tail of its output:\n%s", runErr, tail(out, 60))
	}
	if runErr == nil && len(sum.passed) == 0 {
		t.Errorf("suite ran no tests; tail of its output:\n%s", tail(out, 60))
	}
}

// summary is what go test -v printed, by top-level test.
type summary struct {
	passed, failed, skipped []string
	lines                   []string
}

var resultLine = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) `)

func summarize(out []byte) summary {
	var s summary
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		s.lines = append(s.lines, line)
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch m[1] {
		case "PASS":
			s.passed = append(s.passed, m[2])
		case "FAIL":
			s.failed = append(s.failed, m[2])
		case "SKIP":
			s.skipped = append(s.skipped, m[2])
		}
	}
	return s
}

// output returns the lines printed between the test's last "=== RUN" or
// "=== CONT" and its "--- FAIL", at most max of them (the last ones).
func (s summary) output(name string, max int) string {
	from, to := -1, -1
	for i, line := range s.lines {
		switch {
		case line == "=== RUN   "+name || line == "=== CONT  "+name:
			from = i
		case strings.HasPrefix(line, "--- FAIL: "+name+" "):
			to = i
		}
	}
	if from < 0 || to < from {
		return fmt.Sprintf("(no output found for %s)", name)
	}
	if to-from+1 > max {
		from = to + 1 - max
	}
	return strings.Join(s.lines[from:to+1], "\n")
}

func head(out []byte, n int) string {
	lines := strings.SplitN(string(out), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
