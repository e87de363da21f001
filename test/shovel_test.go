package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

// Dynamic shovels (RabbitMQ's shovel API) between queues of one broker and
// between two Trident processes, with amqp091-go clients.

func publishBodies(t *testing.T, ch *amqp.Channel, queue string, from, to int) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, to-from))
	for i := from; i < to; i++ {
		if err := ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := from; i < to; i++ {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", i)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d confirms", i-from, to-from)
		}
	}
}

func queueCount(t *testing.T, url, queue string) int {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		return -1
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return -1
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return -1
	}
	return q.Messages
}

// drainAll consumes queue until it has been quiet for a moment and returns
// how many times each body arrived.
func drainAll(t *testing.T, url, queue string) map[string]int {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for {
		select {
		case d := <-ds:
			got[string(d.Body)]++
		case <-time.After(time.Second):
			return got
		}
	}
}

func TestShovelMoveWithinBroker(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	for _, q := range []string{"src", "dst"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	publishBodies(t, ch, "src", 0, 500)

	// Bad input: 400 naming the field.
	for field, value := range map[string]map[string]any{
		"src-uri":            {"src-uri": "http://x", "src-queue": "src", "dest-uri": "amqp://", "dest-queue": "dst"},
		"dest-uri":           {"src-uri": "amqp://", "src-queue": "src"},
		"ack-mode":           {"src-uri": "amqp://", "src-queue": "src", "dest-uri": "amqp://", "dest-queue": "dst", "ack-mode": "sometimes"},
		"src-delete-after":   {"src-uri": "amqp://", "src-queue": "src", "dest-uri": "amqp://", "dest-queue": "dst", "src-delete-after": "later"},
		"src-prefetch-count": {"src-uri": "amqp://", "src-queue": "src", "dest-uri": "amqp://", "dest-queue": "dst", "src-prefetch-count": -3},
	} {
		code, body := api.do("PUT", "/api/parameters/shovel/%2F/bad", map[string]any{"value": value})
		if code != 400 || !strings.Contains(string(body), field) {
			t.Fatalf("bad %s: %d %s", field, code, body)
		}
	}
	code, body := api.do("PUT", "/api/parameters/shovel/%2F/bad", map[string]any{"value": map[string]any{
		"src-uri": "amqp://guest:guest@[::1", "src-queue": "src", "dest-uri": "amqp://", "dest-queue": "dst"}})
	if code != 400 || !strings.Contains(string(body), "src-uri") {
		t.Fatalf("unparsable src-uri: %d %s", code, body)
	}

	// "Move messages": everything the queue holds, then the shovel deletes itself.
	api.expect(201, "PUT", "/api/parameters/shovel/%2F/Move%20from%20src", map[string]any{"value": map[string]any{
		"src-uri": "amqp:///%2F", "src-queue": "src", "dest-uri": "amqp:///%2F", "dest-queue": "dst",
		"src-delete-after": "queue-length", "ack-mode": "on-confirm", "src-prefetch-count": 100}})
	waitUntil(t, "the queue moved", func() bool { return queueCount(t, b.URL, "dst") == 500 })
	waitUntil(t, "the completed shovel deleted", func() bool { return len(api.list("/api/parameters/shovel/%2F")) == 0 })
	if n := queueCount(t, b.URL, "src"); n != 0 {
		t.Fatalf("source holds %d after the move", n)
	}
	got := drainAll(t, b.URL, "dst")
	for i := range 500 {
		if got[strconv.Itoa(i)] != 1 {
			t.Fatalf("message %d arrived %d times", i, got[strconv.Itoa(i)])
		}
	}
}

// A shovel from this broker's queue to another Trident process: it moves
// what arrives, keeps retrying (and says why) while the destination is
// killed, loses nothing with on-confirm, and survives its own broker's
// restart.
func TestShovelBetweenProcesses(t *testing.T) {
	remote := testbin.Start(t)
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("out", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	api.expect(201, "PUT", "/api/parameters/shovel/%2F/to-remote", map[string]any{"value": map[string]any{
		"src-uri": "amqp://", "src-queue": "out", "dest-uri": remote.AMQPURL, "dest-queue": "in",
		"ack-mode": "on-confirm", "reconnect-delay": 0.2}})
	state := func() map[string]any {
		for _, s := range api.list("/api/shovels") {
			if s["name"] == "to-remote" {
				return s
			}
		}
		return nil
	}
	waitUntil(t, "the shovel running", func() bool { s := state(); return s != nil && s["state"] == "running" })
	if s := state(); strings.Contains(fmt.Sprint(s["dest_uri"]), "guest:guest") {
		t.Fatalf("the password shows in the state: %v", s["dest_uri"])
	}
	publishBodies(t, ch, "out", 0, 300)
	waitUntil(t, "300 moved", func() bool { return queueCount(t, remote.AMQPURL, "in") == 300 })

	// The destination dies: the shovel says why and retries.
	_ = remote.Kill()
	waitUntil(t, "the shovel terminated with a reason", func() bool {
		s := state()
		return s != nil && s["state"] == "terminated" && s["reason"] != nil && s["reason"] != ""
	})
	_, ch2 := channel(t, b.URL)
	publishBodies(t, ch2, "out", 300, 500)
	time.Sleep(300 * time.Millisecond) // at least one failed reconnect
	if s := state(); s["state"] == "running" {
		t.Fatalf("running while the destination is down: %v", s)
	}
	if err := remote.Restart(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the rest moved after the destination came back", func() bool {
		return queueCount(t, remote.AMQPURL, "in") >= 500 && queueCount(t, b.URL, "out") == 0
	})

	// The shovel's own broker restarts: its definition is back and it runs.
	b.restart()
	api.base = "http://" + b.n.HTTPAddr().String()
	if ps := api.list("/api/parameters/shovel"); len(ps) != 1 || ps[0]["name"] != "to-remote" {
		t.Fatalf("after a restart, parameters %v", ps)
	}
	_, ch3 := channel(t, b.URL)
	publishBodies(t, ch3, "out", 500, 600)
	waitUntil(t, "moved after the restart", func() bool { return queueCount(t, b.URL, "out") == 0 })
	waitUntil(t, "all at the destination", func() bool { return queueCount(t, remote.AMQPURL, "in") >= 600 })
	got := drainAll(t, remote.AMQPURL, "in")
	for i := range 600 {
		if got[strconv.Itoa(i)] == 0 {
			t.Fatalf("message %d lost", i)
		}
	}
	api.expect(204, "DELETE", "/api/parameters/shovel/%2F/to-remote", nil)
	if len(api.list("/api/shovels")) != 0 {
		t.Fatal("a deleted shovel is still listed")
	}
}

// rabbitmqadmin declares a shovel as a parameter.
func TestShovelRabbitmqadmin(t *testing.T) {
	bin, err := exec.LookPath("rabbitmqadmin")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("rabbitmqadmin not installed (Debian package rabbitmq-server); .ci/run installs it")
		}
		t.Skip("rabbitmqadmin not installed")
	}
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("adm-src", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishBodies(t, ch, "adm-src", 0, 10)
	host, port, _ := strings.Cut(strings.TrimPrefix(base, "http://"), ":")
	out, err := exec.Command(bin, "-H", host, "-P", port, "-u", "guest", "-p", "guest", "declare", "parameter",
		"component=shovel", "name=adm", `value={"src-uri":"amqp://","src-queue":"adm-src","dest-uri":"amqp://","dest-queue":"adm-dst"}`).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "parameter declared") {
		t.Fatalf("rabbitmqadmin declare parameter: %v\n%s", err, out)
	}
	waitUntil(t, "moved by the shovel rabbitmqadmin declared", func() bool { return queueCount(t, b.URL, "adm-dst") == 10 })
	out, err = exec.Command(bin, "-H", host, "-P", port, "-u", "guest", "-p", "guest", "list", "parameters").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "adm") {
		t.Fatalf("rabbitmqadmin list parameters: %v\n%s", err, out)
	}
	_ = api
}

// Shovels travel in definitions: exported as parameters, imported through
// POST /api/definitions, and run where they are imported.
func TestShovelDefinitions(t *testing.T) {
	_, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(201, "PUT", "/api/parameters/shovel/%2F/keep", map[string]any{"value": map[string]any{
		"src-uri": "amqp://", "src-queue": "def-src", "dest-uri": "amqp://", "dest-queue": "def-dst"}})
	defs := api.object("/api/definitions")
	params, _ := defs["parameters"].([]any)
	if len(params) != 1 || params[0].(map[string]any)["component"] != "shovel" || params[0].(map[string]any)["name"] != "keep" {
		t.Fatalf("exported parameters: %v", defs["parameters"])
	}
	data, err := json.Marshal(defs)
	if err != nil {
		t.Fatal(err)
	}

	b2, base2 := mgmtBroker(t)
	api2 := apiClient{t: t, base: base2, user: "guest", pass: "guest"}
	api2.expect(204, "POST", "/api/definitions", string(data))
	if ps := api2.list("/api/parameters/shovel/%2F"); len(ps) != 1 || ps[0]["name"] != "keep" {
		t.Fatalf("imported parameters: %v", ps)
	}
	waitUntil(t, "the imported shovel's source queue", func() bool { return queueCount(t, b2.URL, "def-src") == 0 })
	_, ch := channel(t, b2.URL)
	publishBodies(t, ch, "def-src", 0, 5)
	waitUntil(t, "moved by the imported shovel", func() bool { return queueCount(t, b2.URL, "def-dst") == 5 })
}
