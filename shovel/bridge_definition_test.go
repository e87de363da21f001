package shovel

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseBridge(t *testing.T) {
	d, err := ParseBridge(map[string]any{"address": "cloud:8883 [::1]:1884 other", "topic": []any{
		"sensors/# out 1 edge/ site/",
		"cmd/+/set in",
		`"" both 2 local/status remote/status`,
		map[string]any{"pattern": "x/#", "direction": "both", "qos": 1.0, "remote_prefix": "r/"},
	}, "remote_username": "u", "remote_password": "p", "cleansession": true, "bridge_protocol_version": "mqttv50",
		"keepalive_interval": 30.0, "restart_timeout": "2", "bridge_cafile": "/ca.pem", "bridge_insecure": true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(d.Addresses, ",") != "cloud:8883,::1:1884,other:1883" && strings.Join(d.Addresses, ",") != "cloud:8883,[::1]:1884,other:1883" {
		t.Fatalf("addresses %v", d.Addresses)
	}
	want := []BridgeTopic{
		{Pattern: "sensors/#", Direction: DirOut, QoS: 1, LocalPrefix: "edge/", RemotePrefix: "site/"},
		{Pattern: "cmd/+/set", Direction: DirIn},
		{Pattern: "", Direction: DirBoth, QoS: 2, LocalPrefix: "local/status", RemotePrefix: "remote/status"},
		{Pattern: "x/#", Direction: DirBoth, QoS: 1, RemotePrefix: "r/"},
	}
	for i, w := range want {
		if d.Topics[i] != w {
			t.Errorf("topic %d: %+v, want %+v", i, d.Topics[i], w)
		}
	}
	if !d.TLS || !d.Insecure || !d.CleanSession || d.ProtocolVersion != BridgeMQTT50 || d.KeepAlive != 30*time.Second || d.RestartTimeout != 2*time.Second {
		t.Fatalf("options %+v", d)
	}

	for _, tc := range []struct {
		v     map[string]any
		field string
	}{
		{map[string]any{"topic": "a"}, "address"},
		{map[string]any{"address": "h"}, "topic"},
		{map[string]any{"address": "h:99999", "topic": "a"}, "address"},
		{map[string]any{"address": "h", "topic": "a sideways"}, "topic[0]"},
		{map[string]any{"address": "h", "topic": "a out 3"}, "topic[0]"},
		{map[string]any{"address": "h", "topic": "a out 1 x/#/ y/"}, "topic[0]"},
		{map[string]any{"address": "h", "topic": "a/#/b"}, "topic[0]"},
		{map[string]any{"address": "h", "topic": "a/b+"}, "topic[0]"},
		{map[string]any{"address": "h", "topic": `"" out 1 "" y/`}, "topic[0]"},
		{map[string]any{"address": "h", "topic": "a out 1 x/"}, "topic[0]"},
		{map[string]any{"address": "h", "topic": []any{"a", 7.0}}, "topic[1]"},
		{map[string]any{"address": "h", "topic": "a", "try_private": true}, "try_private"},
		{map[string]any{"address": "h", "topic": "a", "remote_password": "p"}, "remote_password"},
		{map[string]any{"address": "h", "topic": "a", "bridge_protocol_version": "mqttv6"}, "bridge_protocol_version"},
		{map[string]any{"address": "h", "topic": "a", "bridge_insecure": true}, "bridge_insecure"},
		{map[string]any{"address": "h", "topic": "a", "bridge_certfile": "c"}, "bridge_certfile"},
		{map[string]any{"address": "h", "topic": "a", "keepalive_interval": 1.0}, "keepalive_interval"},
		{map[string]any{"address": "h", "topic": "a", "cleansession": "no"}, "cleansession"},
	} {
		_, err := ParseBridge(tc.v)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%v: error %v, want one for %s", tc.v, err, tc.field)
		}
	}
}

func TestBridgeTopicMapping(t *testing.T) {
	d, err := ParseBridge(map[string]any{"address": "h", "topic": []any{
		"sensors/# out 1 edge/ site/", "cmd/+ in 1 edge/ site/", `"" both 0 here/status there/status`, "+/raw out 0",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		local, remote string
		qos           byte
	}{
		{"edge/sensors/a/b", "site/sensors/a/b", 1},
		{"edge/sensors", "site/sensors", 1},
		{"here/status", "there/status", 0},
		{"x/raw", "x/raw", 0},
		{"edge/cmd/x", "", 0},      // in only
		{"sensors/a", "", 0},       // without the local prefix
		{"edge/sensorsX/a", "", 0}, // not the level
	} {
		r, q, ok := d.toRemote(tc.local)
		if ok != (tc.remote != "") || r != tc.remote || q != tc.qos {
			t.Errorf("toRemote(%q) = %q %d %v, want %q %d", tc.local, r, q, ok, tc.remote, tc.qos)
		}
	}
	for _, tc := range []struct{ remote, local string }{
		{"site/cmd/x", "edge/cmd/x"},
		{"there/status", "here/status"},
		{"site/cmd/x/y", ""},
		{"site/sensors/a", ""}, // out only
	} {
		l, ok := d.toLocal(tc.remote)
		if ok != (tc.local != "") || l != tc.local {
			t.Errorf("toLocal(%q) = %q %v, want %q", tc.remote, l, ok, tc.local)
		}
	}
}

func TestMatchTopic(t *testing.T) {
	for _, tc := range []struct {
		filter, topic string
		want          bool
	}{
		{"#", "a/b", true}, {"#", "$SYS/x", false}, {"a/#", "a", true}, {"a/#", "a/b/c", true},
		{"a/+", "a/b", true}, {"a/+", "a/b/c", false}, {"a/+", "a/", true}, {"+/+", "a", false},
		{"a/b", "a/b", true}, {"a/b", "a/c", false}, {"+", "$x", false}, {"a", "a/b", false},
	} {
		if got := matchTopic(tc.filter, tc.topic); got != tc.want {
			t.Errorf("matchTopic(%q, %q) = %v", tc.filter, tc.topic, got)
		}
	}
}

func TestEchoes(t *testing.T) {
	e := newEchoes(true)
	e.expect("a/b", []byte("x"))
	e.expect("a/b", []byte("x"))
	if e.echo("a/b", []byte("y")) || e.echo("a/c", []byte("x")) {
		t.Fatal("another message taken for an echo")
	}
	if !e.echo("a/b", []byte("x")) || !e.echo("a/b", []byte("x")) || e.echo("a/b", []byte("x")) {
		t.Fatal("two publishes, two echoes, no third")
	}
	off := newEchoes(false)
	off.expect("a", nil)
	if off.echo("a", nil) {
		t.Fatal("MQTT 5 (no-local) expects no echo")
	}
}

func TestRedactedBridge(t *testing.T) {
	v := map[string]any{"address": "h", "remote_password": "secret"}
	r := RedactedBridge(v)
	if r["remote_password"] != "***" || v["remote_password"] != "secret" || r["address"] != "h" {
		t.Fatalf("%v %v", r, v)
	}
}
