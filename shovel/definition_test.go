package shovel

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

func base() map[string]any {
	return map[string]any{"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://guest:guest@host:5672/v", "dest-queue": "b"}
}

func with(kv ...any) map[string]any {
	v := base()
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(v, kv[i].(string))
		} else {
			v[kv[i].(string)] = kv[i+1]
		}
	}
	return v
}

func TestParse(t *testing.T) {
	d, err := Parse(base())
	if err != nil {
		t.Fatal(err)
	}
	if d.AckMode != AckOnConfirm || d.Prefetch != DefaultPrefetch || d.ReconnectDelay != DefaultReconnectDelay || d.DeleteAfter != 0 {
		t.Fatalf("defaults: %+v", d)
	}
	d, err = Parse(with("src-delete-after", "queue-length", "ack-mode", "no-ack", "src-prefetch-count", float64(10),
		"reconnect-delay", 0.5, "src-uri", []any{"amqp://h1", "amqp://h2"}))
	if err != nil {
		t.Fatal(err)
	}
	if d.DeleteAfter != -1 || d.AckMode != AckNoAck || d.Prefetch != 10 || d.ReconnectDelay != 500*time.Millisecond || len(d.SrcURIs) != 2 {
		t.Fatalf("parsed %+v", d)
	}
	if d, err = Parse(with("src-delete-after", float64(7))); err != nil || d.DeleteAfter != 7 {
		t.Fatalf("src-delete-after 7: %+v %v", d, err)
	}
	if d, err = Parse(with("src-queue", nil, "src-exchange", "x", "src-exchange-key", "k", "dest-queue", nil, "dest-exchange", "y")); err != nil || d.SrcExchange != "x" {
		t.Fatalf("exchanges: %+v %v", d, err)
	}

	bad := []struct {
		field string
		v     map[string]any
	}{
		{"src-uri", with("src-uri", nil)},
		{"src-uri", with("src-uri", "http://h")},
		{"src-uri", with("src-uri", "amqp://u:p@[::1")},
		{"src-uri", with("src-uri", float64(3))},
		{"dest-uri", with("dest-uri", "amqps://")},
		{"src-queue", with("src-queue", nil)},
		{"src-queue", with("src-exchange", "x")},
		{"dest-queue", with("dest-exchange", "x")},
		{"ack-mode", with("ack-mode", "maybe")},
		{"src-prefetch-count", with("src-prefetch-count", float64(0))},
		{"src-prefetch-count", with("src-prefetch-count", "many")},
		{"reconnect-delay", with("reconnect-delay", float64(-1))},
		{"src-delete-after", with("src-delete-after", "soon")},
		{"src-delete-after", with("src-delete-after", float64(-2))},
		{"src-delete-after", with("src-queue", nil, "src-exchange", "x", "src-delete-after", "queue-length")},
		{"src-protocol", with("src-protocol", "amqp10")},
	}
	for _, c := range bad {
		_, err := Parse(c.v)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%v: error %v, want one naming %s", c.v, err, c.field)
		}
	}
}

func TestLocalVHostAndRedact(t *testing.T) {
	for uri, want := range map[string]string{"amqp://": "/", "amqp:///": "/", "amqp:///%2F": "/", "amqp:///prod": "prod", "amqp:///a%2Fb": "a/b"} {
		if got, ok := localVHost(uri); !ok || got != want {
			t.Errorf("localVHost(%q) = %q, %v; want %q", uri, got, ok, want)
		}
	}
	if _, ok := localVHost("amqp://host/"); ok {
		t.Error("a remote URI taken as local")
	}
	if got := redact("amqp://u:secret@h:5672/v"); got != "amqp://u:%2A%2A%2A@h:5672/v" && got != "amqp://u:***@h:5672/v" {
		t.Errorf("redact: %s", got)
	}
}

func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"amqp://guest:guest@127.0.0.1:5672/secret", "amqp://guest:***@127.0.0.1:5672/secret"},
		{"amqps://u%40x:p%2Fw@h/v?heartbeat=5", "amqps://u%40x:***@h/v?heartbeat=5"},
		{"amqp://guest:guest@/secret", "amqp://guest:***@/secret"},
		{"amqp://user@host/", "amqp://user@host/"},
		{"amqp://", "amqp://"},
		{"amqp:///%2F", "amqp:///%2F"},
		{"amqp://guest:hunter2@[::1", "amqp://***@[::1"},
	} {
		if got := redact(c.in); got != c.want {
			t.Errorf("redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	v := map[string]any{"src-uri": "amqp://a:pw1@h/", "dest-uri": []any{"amqp://b:pw2@h/", "amqp://"}, "src-queue": "q"}
	r := Redacted(v)
	if r["src-uri"] != "amqp://a:***@h/" || r["dest-uri"].([]any)[0] != "amqp://b:***@h/" || r["src-queue"] != "q" {
		t.Errorf("Redacted: %v", r)
	}
	if v["src-uri"] != "amqp://a:pw1@h/" {
		t.Errorf("Redacted changed its argument: %v", v)
	}
	if err := checkURI("amqp://guest:hunter2@[::1"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("checkURI error shows the password: %v", err)
	}
}

// FuzzRedact: redact never panics, and a password that occurs once in a
// URI never survives it.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"amqp://guest:guest@127.0.0.1:5672/secret", "amqps://u:secretpw@h/v?x=1", "amqp://a:b@c@d/",
		"amqp://guest:hunter2@[::1", "amqp://", "amqp://:pw12@h", "amqp://u:p%41ss@h/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		out := redact(uri)
		u, err := url.Parse(uri)
		if err != nil || u.User == nil {
			return
		}
		p, ok := u.User.Password()
		if !ok || len(p) < 4 || strings.Count(uri, p) != 1 {
			return
		}
		if strings.Contains(out, p) {
			t.Fatalf("redact(%q) = %q shows the password", uri, out)
		}
	})
}
