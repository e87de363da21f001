package test

import (
	"net"
	"strings"
	"testing"
	"time"
)

// Issue 38, F8: a shovel's own connection is never "from loopback", so a
// policymaker cannot use guest@127.0.0.1 (or any user it has not the
// password of) to move messages out of another vhost; URI passwords are
// never shown back; a shovel's state does not tell an open port from a
// closed one.

func TestSecurityF8ShovelLoopback(t *testing.T) {
	b, base := mgmtBroker(t)
	admin := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	for _, v := range []string{"va", "secret"} {
		admin.expect(201, "PUT", "/api/vhosts/"+v, nil)
	}
	all := map[string]any{"configure": ".*", "write": ".*", "read": ".*"}
	put := func(path string, body any) {
		t.Helper()
		if code, data := admin.do("PUT", path, body); code != 201 && code != 204 {
			t.Fatalf("PUT %s: %d %s", path, code, data)
		}
	}
	put("/api/permissions/secret/guest", all)
	admin.expect(201, "PUT", "/api/users/pm", map[string]any{"password": "pm-secret-pw", "tags": "policymaker"})
	admin.expect(201, "PUT", "/api/permissions/va/pm", all)
	admin.expect(201, "PUT", "/api/users/mover", map[string]any{"password": "mover-secret-pw", "tags": ""})
	admin.expect(201, "PUT", "/api/permissions/va/mover", all)
	admin.expect(201, "PUT", "/api/permissions/secret/mover", all)
	pm := admin.as("pm", "pm-secret-pw")

	// vhost secret holds messages pm must not reach.
	secretURL := "amqp://guest:guest@" + b.Addr + "/secret"
	_, ch := channel(t, secretURL)
	for _, q := range []string{"private", "allowed"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		publishBodies(t, ch, q, 0, 10)
	}
	vaURL := "amqp://guest:guest@" + b.Addr + "/va"
	put("/api/permissions/va/guest", all)

	state := func(name string) map[string]any {
		for _, s := range pm.list("/api/shovels/va") {
			if s["name"] == name {
				return s
			}
		}
		return nil
	}
	terminated := func(name string) map[string]any {
		t.Helper()
		var s map[string]any
		waitUntil(t, name+" terminated", func() bool {
			s = state(name)
			return s != nil && s["state"] == "terminated"
		})
		return s
	}
	shovelFrom := func(name, srcURI, queue string) {
		t.Helper()
		pm.expect(201, "PUT", "/api/parameters/shovel/va/"+name, map[string]any{"value": map[string]any{
			"src-uri": srcURI, "src-queue": queue, "dest-uri": "amqp:///va", "dest-queue": "stolen-" + name,
			"reconnect-delay": 0.2}})
	}

	// The finding: guest's password over TCP to 127.0.0.1 (and localhost),
	// and in-process; pm's own user and pm's own identity, which have no
	// access to vhost secret.
	attempts := map[string]string{
		"guest-tcp":       "amqp://guest:guest@" + b.Addr + "/secret",
		"guest-localhost": "amqp://guest:guest@localhost:" + strings.Split(b.Addr, ":")[1] + "/secret",
		"guest-local":     "amqp://guest:guest@/secret",
		"pm-tcp":          "amqp://pm:pm-secret-pw@" + b.Addr + "/secret",
		"pm-local":        "amqp:///secret",
	}
	for name, uri := range attempts {
		shovelFrom(name, uri, "private")
	}
	for name := range attempts {
		s := terminated(name)
		if s["reason"] != "source: connection failed" {
			t.Errorf("shovel %s: reason %q, want the generic one", name, s["reason"])
		}
	}
	time.Sleep(500 * time.Millisecond) // retries at 0.2 s: more chances to move
	for name := range attempts {
		if s := state(name); s["state"] == "running" || num(s["messages_transferred"]) != 0 {
			t.Errorf("shovel %s ran: %v", name, s)
		}
		if n := queueCount(t, vaURL, "stolen-"+name); n > 0 {
			t.Errorf("shovel %s moved %d messages out of vhost secret", name, n)
		}
	}
	if n := queueCount(t, secretURL, "private"); n != 10 {
		t.Fatalf("secret/private holds %d messages, want 10", n)
	}

	// A user with access to both vhosts, by its password: the shovel works
	// (so the refusals above are the login's, not a broken shovel).
	shovelFrom("mover", "amqp://mover:mover-secret-pw@"+b.Addr+"/secret", "allowed")
	waitUntil(t, "mover's shovel moved the queue", func() bool { return queueCount(t, vaURL, "stolen-mover") == 10 })

	// No password shows in any answer: the parameters (one, a vhost's,
	// all) and the states.
	for _, path := range []string{"/api/parameters/shovel/va/guest-tcp", "/api/parameters/shovel/va/mover",
		"/api/parameters/shovel/va", "/api/parameters/shovel", "/api/parameters", "/api/shovels", "/api/shovels/va"} {
		body := string(pm.expect(200, "GET", path, nil))
		for _, pw := range []string{"guest:guest", "pm-secret-pw", "mover-secret-pw"} {
			if strings.Contains(body, pw) {
				t.Errorf("GET %s shows a password (%s): %s", path, pw, body)
			}
		}
		if !strings.Contains(body, "***") {
			t.Errorf("GET %s: no masked password in %s", path, body)
		}
	}
	// A URI that does not validate is not echoed with its password either.
	_, body := pm.do("PUT", "/api/parameters/shovel/va/bad", map[string]any{"value": map[string]any{
		"src-uri": "amqp://guest:hunter2@[::1", "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q"}})
	if strings.Contains(string(body), "hunter2") {
		t.Errorf("the 400 echoes the password: %s", body)
	}

	// A closed port and an open port that does not speak AMQP: the same
	// state and reason.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	go func() {
		for {
			c, err := open.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			c.Close()
		}
	}()
	shovelFrom("port-closed", "amqp://u:p@"+closedAddr+"/", "q")
	shovelFrom("port-open", "amqp://u:p@"+open.Addr().String()+"/", "q")
	c, o := terminated("port-closed"), terminated("port-open")
	if c["reason"] != o["reason"] || c["state"] != o["state"] {
		t.Errorf("a closed port (%v: %q) and an open one (%v: %q) look different", c["state"], c["reason"], o["state"], o["reason"])
	}
}
