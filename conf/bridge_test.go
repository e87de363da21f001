package conf

import (
	"strings"
	"testing"
	"time"
)

// TestBridgesFromFile: mqtt.bridges is read from the file with
// Mosquitto's keys, from the environment as YAML or JSON, and its
// mistakes are named by key path.
func TestBridgesFromFile(t *testing.T) {
	c, err := Load([]string{"--config", writeFile(t, `
mqtt:
  bridges:
    - name: cloud
      address: cloud.example.com:8883 backup.example.com
      topics: ["sensors/# out 1 edge/ site/", "cmd/# in 2"]
      remote_username: site
      remote_password: pw
      keepalive_interval: 30s
      bridge_cafile: /etc/ca.pem
`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.MQTT.Bridges) != 1 {
		t.Fatalf("bridges %+v", c.MQTT.Bridges)
	}
	b := c.MQTT.Bridges[0]
	if b.Name != "cloud" || len(b.Topics) != 2 || b.KeepaliveInterval != 30*time.Second || b.BridgeCAFile != "/etc/ca.pem" {
		t.Fatalf("bridge %+v", b)
	}
	v := b.Value()
	if v["keepalive_interval"] != 30.0 || v["remote_password"] != "pw" || len(v["topic"].([]any)) != 2 || v["cleansession"] != false {
		t.Fatalf("value %v", v)
	}

	env := map[string]string{"TRIDENT_MQTT_BRIDGES": `[{"name": "e", "address": "h:1883", "topics": ["a/# both 1"]}]`}
	c, err = Load(nil, func(k string) string { return env[k] })
	if err != nil || len(c.MQTT.Bridges) != 1 || c.MQTT.Bridges[0].Topics[0] != "a/# both 1" {
		t.Fatalf("from the environment: %+v %v", c.MQTT.Bridges, err)
	}

	for _, tc := range []struct{ yaml, want string }{
		{"mqtt:\n  bridges:\n    - name: x\n      adress: h\n      topics: [a]\n", "mqtt.bridges[0].adress: unknown key (did you mean mqtt.bridges[0].address?)"},
		{"mqtt:\n  bridges:\n    - address: h\n      topics: [a]\n", "mqtt.bridges[0].name: is required"},
		{"mqtt:\n  bridges:\n    - name: x\n      address: h\n", "mqtt.bridges[0].topics: at least one topic rule is required"},
		{"mqtt:\n  bridges:\n    - {name: x, address: h, topics: [a]}\n    - {name: x, address: h, topics: [a]}\n", `mqtt.bridges[1].name: "x" is also mqtt.bridges[0]'s name`},
		{"mqtt:\n  bridges:\n    - {name: x, address: h, topics: [a], keepalive_interval: 1s}\n", "mqtt.bridges[0].keepalive_interval"},
	} {
		_, err := Load([]string{"--config", writeFile(t, tc.yaml)}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
	if got := BridgeKey(2, "topic[1]"); got != "mqtt.bridges[2].topics[1]" {
		t.Errorf("BridgeKey: %s", got)
	}
}
