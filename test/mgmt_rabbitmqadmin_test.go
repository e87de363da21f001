package test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMgmtRabbitmqadmin drives Trident with RabbitMQ's own CLI
// (/usr/bin/rabbitmqadmin from Debian's rabbitmq-server package; .ci/run
// installs it). Locally it is skipped when missing; in CI ($CI set) a
// missing binary fails the test.
func TestMgmtRabbitmqadmin(t *testing.T) {
	bin, err := exec.LookPath("rabbitmqadmin")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("rabbitmqadmin not installed (Debian package rabbitmq-server); .ci/run installs it")
		}
		t.Skip("rabbitmqadmin not installed: apt-get install rabbitmq-server (the service need not run)")
	}
	b, base := mgmtBroker(t)
	_ = b
	host, port, _ := strings.Cut(strings.TrimPrefix(base, "http://"), ":")
	run := func(args ...string) string {
		t.Helper()
		full := append([]string{"-H", host, "-P", port, "-u", "guest", "-p", "guest"}, args...)
		out, err := exec.Command(bin, full...).CombinedOutput()
		if err != nil {
			t.Fatalf("rabbitmqadmin %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run("declare", "queue", "name=adminq", "durable=true"); !strings.Contains(out, "queue declared") {
		t.Errorf("declare queue: %s", out)
	}
	if out := run("list", "queues"); !strings.Contains(out, "adminq") {
		t.Errorf("list queues:\n%s", out)
	}
	if out := run("list", "exchanges"); !strings.Contains(out, "amq.topic") {
		t.Errorf("list exchanges:\n%s", out)
	}
	if out := run("publish", "exchange=amq.default", "routing_key=adminq", "payload=hello from rabbitmqadmin"); !strings.Contains(out, "Message published") {
		t.Errorf("publish: %s", out)
	}
	out := run("get", "queue=adminq", "ackmode=ack_requeue_false")
	if !strings.Contains(out, "hello from rabbitmqadmin") {
		t.Errorf("get:\n%s", out)
	}
	if out := run("-f", "tsv", "-q", "list", "queues", "name", "messages"); !strings.Contains(out, "adminq\t0") {
		t.Errorf("after get: %q", out)
	}
	run("declare", "exchange", "name=adminx", "type=fanout")
	run("declare", "binding", "source=adminx", "destination=adminq")
	if out := run("list", "bindings"); !strings.Contains(out, "adminx") {
		t.Errorf("bindings:\n%s", out)
	}
	run("delete", "queue", "name=adminq")
	if out := run("list", "queues"); strings.Contains(out, "adminq") {
		t.Errorf("queue not deleted:\n%s", out)
	}
}
