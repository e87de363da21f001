package conf

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Bridge is an MQTT bridge of the configuration file (mqtt.bridges[i]):
// a connection from this node to a remote MQTT broker with topic rules,
// Mosquitto's connection block in YAML. The keys are Mosquitto's; the
// shovel package validates the rules (at start, errors named
// mqtt.bridges[i].key). Such a bridge runs on the node whose file
// declares it, as the local user User in VHost.
//
//	mqtt:
//	  bridges:
//	    - name: cloud
//	      address: cloud.example.com:8883
//	      topics:
//	        - "sensors/# out 1 edge/ site1/"
//	        - "commands/# in 1"
//	      remote_username: site1
//	      remote_password: secret
//	      bridge_cafile: /etc/trident/cloud-ca.pem
type Bridge struct {
	Name string `yaml:"name"`
	// VHost and User are where and as whom the bridge acts here (default
	// default_vhost and default_user).
	VHost string `yaml:"vhost"`
	User  string `yaml:"user"`
	// Address is host[:port] (1883 by default), several separated by
	// spaces, tried in turn.
	Address string `yaml:"address"`
	// Topics are Mosquitto's topic lines: "pattern [[[out | in | both]
	// qos] local-prefix remote-prefix]" ("" for an empty prefix).
	Topics         []string `yaml:"topics"`
	RemoteUsername string   `yaml:"remote_username"`
	RemotePassword string   `yaml:"remote_password"`
	RemoteClientID string   `yaml:"remote_clientid"`
	// CleanSession false (the default, as Mosquitto's) keeps a
	// persistent session on the remote broker.
	CleanSession bool `yaml:"cleansession"`
	// BridgeProtocolVersion: mqttv311 (default), mqttv31 or mqttv50.
	BridgeProtocolVersion string `yaml:"bridge_protocol_version"`
	// KeepaliveInterval (default 60s) and RestartTimeout, the wait
	// before connecting again after a failure (default 5s).
	KeepaliveInterval time.Duration `yaml:"keepalive_interval"`
	RestartTimeout    time.Duration `yaml:"restart_timeout"`
	// TLS: on with BridgeTLS or BridgeCAFile (system roots without a CA
	// file); BridgeInsecure skips the host name check only.
	BridgeTLS         bool   `yaml:"bridge_tls"`
	BridgeCAFile      string `yaml:"bridge_cafile"`
	BridgeCertFile    string `yaml:"bridge_certfile"`
	BridgeKeyFile     string `yaml:"bridge_keyfile"`
	BridgeInsecure    bool   `yaml:"bridge_insecure"`
	BridgeMaxInflight int    `yaml:"bridge_max_inflight"`
}

// Value is the bridge as the API's value (the keys of
// /api/parameters/mqtt-bridge), for the shovel package to validate and
// run.
func (b Bridge) Value() map[string]any {
	v := map[string]any{"address": b.Address, "cleansession": b.CleanSession,
		"bridge_tls": b.BridgeTLS, "bridge_insecure": b.BridgeInsecure}
	topics := make([]any, len(b.Topics))
	for i, t := range b.Topics {
		topics[i] = t
	}
	v["topic"] = topics
	for k, s := range map[string]string{"remote_username": b.RemoteUsername, "remote_password": b.RemotePassword,
		"remote_clientid": b.RemoteClientID, "bridge_protocol_version": b.BridgeProtocolVersion,
		"bridge_cafile": b.BridgeCAFile, "bridge_certfile": b.BridgeCertFile, "bridge_keyfile": b.BridgeKeyFile} {
		if s != "" {
			v[k] = s
		}
	}
	if b.KeepaliveInterval != 0 {
		v["keepalive_interval"] = b.KeepaliveInterval.Seconds()
	}
	if b.RestartTimeout != 0 {
		v["restart_timeout"] = b.RestartTimeout.Seconds()
	}
	if b.BridgeMaxInflight != 0 {
		v["bridge_max_inflight"] = float64(b.BridgeMaxInflight)
	}
	return v
}

// BridgeKey names a key of the API's bridge value (as a validation error
// gives it) as the configuration file's key of bridge i.
func BridgeKey(i int, key string) string {
	if rest, ok := strings.CutPrefix(key, "topic"); ok && !strings.HasPrefix(rest, "s") {
		key = "topics" + rest
	}
	return fmt.Sprintf("mqtt.bridges[%d].%s", i, key)
}

func (c *Config) validateBridges(bad func(key, format string, args ...any)) {
	seen := map[string]int{}
	for i, b := range c.MQTT.Bridges {
		key := func(k string) string { return fmt.Sprintf("mqtt.bridges[%d].%s", i, k) }
		if b.Name == "" {
			bad(key("name"), "is required")
		}
		vh := b.VHost
		if vh == "" {
			vh = c.DefaultVHost
		}
		if j, ok := seen[vh+"\x00"+b.Name]; ok && b.Name != "" {
			bad(key("name"), "%q is also mqtt.bridges[%d]'s name in vhost %q", b.Name, j, vh)
		}
		seen[vh+"\x00"+b.Name] = i
		if strings.TrimSpace(b.Address) == "" {
			bad(key("address"), "is required (host[:port])")
		}
		if len(b.Topics) == 0 {
			bad(key("topics"), "at least one topic rule is required")
		}
		if b.KeepaliveInterval != 0 && (b.KeepaliveInterval < 5*time.Second || b.KeepaliveInterval%time.Second != 0 || b.KeepaliveInterval > 65535*time.Second) {
			bad(key("keepalive_interval"), "%s is not a whole number of seconds in [5s, 65535s]", b.KeepaliveInterval)
		}
		if b.RestartTimeout < 0 {
			bad(key("restart_timeout"), "%s must not be negative", b.RestartTimeout)
		}
	}
}

// parseBridges reads mqtt.bridges from a flag or the environment: a YAML
// list (JSON is YAML too), its keys checked as the file's are.
func parseBridges(p *[]Bridge, s string) error {
	var list []Bridge
	if strings.TrimSpace(s) != "" {
		dec := yaml.NewDecoder(bytes.NewReader([]byte(s)))
		dec.KnownFields(true)
		if err := dec.Decode(&list); err != nil {
			return fmt.Errorf("not a list of bridges: %v", err)
		}
	}
	*p = list
	return nil
}
