package shovel

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// ComponentMQTTBridge is the parameter component of MQTT bridges
// (/api/parameters/mqtt-bridge/{vhost}/{name}); ComponentShovel that of
// shovels.
const (
	ComponentShovel     = "shovel"
	ComponentMQTTBridge = "mqtt-bridge"
)

// Directions of a bridge topic, as Mosquitto's.
const (
	DirOut  = "out"  // local → remote
	DirIn   = "in"   // remote → local
	DirBoth = "both" // both
)

// Protocol versions of a bridge's remote connection (Mosquitto's
// bridge_protocol_version).
const (
	BridgeMQTT31  = "mqttv31"
	BridgeMQTT311 = "mqttv311"
	BridgeMQTT50  = "mqttv50"
)

// Defaults of a bridge, as Mosquitto's where it has one.
const (
	DefaultBridgeKeepAlive = 60 * time.Second
	DefaultBridgeRestart   = 5 * time.Second
	DefaultBridgePort      = "1883"
)

// BridgeTopic is one topic rule of a bridge (Mosquitto's
// "topic pattern [[[out | in | both] qos] local-prefix remote-prefix]"):
// locally the rule covers LocalPrefix+Pattern, remotely
// RemotePrefix+Pattern, and a topic moves from one side to the other by
// swapping the prefixes.
type BridgeTopic struct {
	Pattern      string `json:"pattern"`
	Direction    string `json:"direction"`
	QoS          byte   `json:"qos"`
	LocalPrefix  string `json:"local_prefix,omitempty"`
	RemotePrefix string `json:"remote_prefix,omitempty"`
}

// out and in report whether the rule forwards that way.
func (t BridgeTopic) out() bool { return t.Direction == DirOut || t.Direction == DirBoth }
func (t BridgeTopic) in() bool  { return t.Direction == DirIn || t.Direction == DirBoth }

// LocalFilter and RemoteFilter are the rule's topic filter on each side.
func (t BridgeTopic) LocalFilter() string  { return t.LocalPrefix + t.Pattern }
func (t BridgeTopic) RemoteFilter() string { return t.RemotePrefix + t.Pattern }

// BridgeDefinition is an MQTT bridge's value, parsed from Mosquitto's
// keys (Parse for shovels' is RabbitMQ's).
type BridgeDefinition struct {
	Addresses       []string // host:port, tried in turn
	Topics          []BridgeTopic
	Username        string
	Password        string
	ClientID        string // "" the default (the node's name and the bridge's)
	CleanSession    bool
	ProtocolVersion string
	KeepAlive       time.Duration
	RestartTimeout  time.Duration
	// TLS: on when TLS or CAFile is set.
	TLS      bool
	CAFile   string
	CertFile string
	KeyFile  string
	Insecure bool
	// Prefetch bounds the out-direction's messages sent to the remote
	// and not yet acknowledged by it.
	Prefetch int
}

// Keys of a bridge's value (Mosquitto's names).
var bridgeKeys = map[string]bool{
	"address": true, "addresses": true, "topic": true, "topics": true, "remote_username": true, "remote_password": true,
	"remote_clientid": true, "cleansession": true, "bridge_protocol_version": true, "keepalive_interval": true,
	"restart_timeout": true, "bridge_tls": true, "bridge_cafile": true, "bridge_certfile": true, "bridge_keyfile": true,
	"bridge_insecure": true, "bridge_max_inflight": true,
}

// ParseBridge validates an MQTT bridge's value. A key it does not know is
// an error (a Mosquitto option Trident does not implement is refused by
// name rather than ignored).
func ParseBridge(v map[string]any) (BridgeDefinition, error) {
	d := BridgeDefinition{ProtocolVersion: BridgeMQTT311, KeepAlive: DefaultBridgeKeepAlive,
		RestartTimeout: DefaultBridgeRestart, Prefetch: 256}
	for k := range v {
		if !bridgeKeys[k] {
			return d, fieldErr(k, "unknown key (a bridge has address, topic, remote_username, remote_password, remote_clientid, "+
				"cleansession, bridge_protocol_version, keepalive_interval, restart_timeout, bridge_tls, bridge_cafile, "+
				"bridge_certfile, bridge_keyfile, bridge_insecure, bridge_max_inflight)")
		}
	}
	var err error
	if d.Addresses, err = bridgeAddresses(v); err != nil {
		return d, err
	}
	if d.Topics, err = bridgeTopics(v); err != nil {
		return d, err
	}
	for _, k := range []struct {
		key string
		dst *string
	}{{"remote_username", &d.Username}, {"remote_password", &d.Password}, {"remote_clientid", &d.ClientID},
		{"bridge_cafile", &d.CAFile}, {"bridge_certfile", &d.CertFile}, {"bridge_keyfile", &d.KeyFile}} {
		if *k.dst, _, err = str(v, k.key); err != nil {
			return d, err
		}
	}
	if d.Password != "" && d.Username == "" {
		return d, fieldErr("remote_password", "needs remote_username")
	}
	if len(d.ClientID) > 65535 {
		return d, fieldErr("remote_clientid", "is longer than 65535 bytes")
	}
	if (d.CertFile == "") != (d.KeyFile == "") {
		return d, fieldErr("bridge_certfile", "bridge_certfile and bridge_keyfile go together")
	}
	bools := []struct {
		key string
		dst *bool
	}{{"cleansession", &d.CleanSession}, {"bridge_tls", &d.TLS}, {"bridge_insecure", &d.Insecure}}
	for _, b := range bools {
		if x, ok := v[b.key]; ok && x != nil {
			bv, isBool := x.(bool)
			if !isBool {
				return d, fieldErr(b.key, "%v is not true or false", x)
			}
			*b.dst = bv
		}
	}
	d.TLS = d.TLS || d.CAFile != "" || d.CertFile != ""
	if d.Insecure && !d.TLS {
		return d, fieldErr("bridge_insecure", "applies to a TLS bridge only (set bridge_tls or bridge_cafile)")
	}
	if p, ok, err := str(v, "bridge_protocol_version"); err != nil {
		return d, err
	} else if ok {
		switch p {
		case BridgeMQTT31, BridgeMQTT311, BridgeMQTT50:
			d.ProtocolVersion = p
		default:
			return d, fieldErr("bridge_protocol_version", "'%s' is not one of mqttv31, mqttv311, mqttv50", p)
		}
	}
	if n, ok, err := number(v, "keepalive_interval"); err != nil {
		return d, err
	} else if ok {
		if n < 5 || n > 65535 || n != float64(int(n)) {
			return d, fieldErr("keepalive_interval", "%v is not a whole number of seconds in [5, 65535]", v["keepalive_interval"])
		}
		d.KeepAlive = time.Duration(n) * time.Second
	}
	if n, ok, err := number(v, "restart_timeout"); err != nil {
		return d, err
	} else if ok {
		if n < 1 || n > 86400 {
			return d, fieldErr("restart_timeout", "%v is not a number of seconds in [1, 86400]", v["restart_timeout"])
		}
		d.RestartTimeout = time.Duration(n * float64(time.Second))
	}
	if n, ok, err := number(v, "bridge_max_inflight"); err != nil {
		return d, err
	} else if ok {
		if n < 1 || n > 65535 || n != float64(int(n)) {
			return d, fieldErr("bridge_max_inflight", "%v is not an integer in [1, 65535]", v["bridge_max_inflight"])
		}
		d.Prefetch = int(n)
	}
	return d, nil
}

// bridgeAddresses reads address: "host[:port]", several separated by
// spaces or commas (Mosquitto's "address a:1883 b:1883"), or a list.
func bridgeAddresses(v map[string]any) ([]string, error) {
	key := "address"
	x, ok := v[key]
	if !ok || x == nil {
		key = "addresses"
		x = v[key]
	}
	var parts []string
	switch a := x.(type) {
	case nil:
		return nil, fieldErr("address", "is required (host[:port])")
	case string:
		parts = strings.FieldsFunc(a, func(r rune) bool { return r == ' ' || r == ',' })
	case []any:
		for _, e := range a {
			s, ok := e.(string)
			if !ok {
				return nil, fieldErr(key, "%v is not host[:port]", e)
			}
			parts = append(parts, s)
		}
	default:
		return nil, fieldErr(key, "%v is not host[:port] or a list of them", x)
	}
	if len(parts) == 0 {
		return nil, fieldErr(key, "is empty")
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			host, port = p, DefaultBridgePort
			if strings.Contains(p, "://") || strings.Count(p, ":") == 1 {
				return nil, fieldErr(key, "'%s' is not host[:port]", p)
			}
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
			return nil, fieldErr(key, "'%s' is not host[:port]", p)
		}
		out = append(out, net.JoinHostPort(strings.Trim(host, "[]"), port))
	}
	return out, nil
}

// bridgeTopics reads topic (or topics): one rule or a list, each a string
// in Mosquitto's syntax or an object with pattern, direction, qos,
// local_prefix, remote_prefix.
func bridgeTopics(v map[string]any) ([]BridgeTopic, error) {
	key := "topic"
	x, ok := v[key]
	if !ok || x == nil {
		key = "topics"
		x = v[key]
	}
	var list []any
	switch t := x.(type) {
	case nil:
		return nil, fieldErr("topic", "at least one topic rule is required")
	case []any:
		list = t
	default:
		list = []any{t}
	}
	if len(list) == 0 {
		return nil, fieldErr(key, "at least one topic rule is required")
	}
	out := make([]BridgeTopic, 0, len(list))
	for i, e := range list {
		field := fmt.Sprintf("%s[%d]", key, i)
		var t BridgeTopic
		var err error
		switch r := e.(type) {
		case string:
			t, err = parseTopicLine(r)
		case map[string]any:
			t, err = parseTopicObject(r)
		default:
			err = fmt.Errorf("%v is not a topic rule (\"pattern [out|in|both [qos [local-prefix remote-prefix]]]\" or an object)", e)
		}
		if err == nil {
			err = t.check()
		}
		if err != nil {
			return nil, fieldErr(field, "%v", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// parseTopicLine reads Mosquitto's "pattern [[[out | in | both] qos-level]
// local-prefix remote-prefix]". As in mosquitto.conf, "" stands for an
// empty pattern or prefix.
func parseTopicLine(s string) (BridgeTopic, error) {
	f := strings.Fields(s)
	t := BridgeTopic{Direction: DirOut}
	unq := func(x string) string {
		if x == `""` {
			return ""
		}
		return x
	}
	switch len(f) {
	case 0:
		return t, fmt.Errorf("is empty")
	case 1, 2, 3, 5:
	default:
		return t, fmt.Errorf("'%s' has %d words: pattern [out|in|both [qos [local-prefix remote-prefix]]]", s, len(f))
	}
	t.Pattern = unq(f[0])
	if len(f) >= 2 {
		t.Direction = f[1]
	}
	if len(f) >= 3 {
		q, err := strconv.Atoi(f[2])
		if err != nil || q < 0 || q > 2 {
			return t, fmt.Errorf("qos '%s' is not 0, 1 or 2", f[2])
		}
		t.QoS = byte(q)
	}
	if len(f) == 5 {
		t.LocalPrefix, t.RemotePrefix = unq(f[3]), unq(f[4])
	}
	return t, nil
}

func parseTopicObject(m map[string]any) (BridgeTopic, error) {
	t := BridgeTopic{Direction: DirOut}
	for k := range m {
		switch k {
		case "pattern", "direction", "qos", "local_prefix", "remote_prefix":
		default:
			return t, fmt.Errorf("unknown key '%s' (pattern, direction, qos, local_prefix, remote_prefix)", k)
		}
	}
	var err error
	if t.Pattern, _, err = str(m, "pattern"); err != nil {
		return t, err
	}
	if d, ok, err := str(m, "direction"); err != nil {
		return t, err
	} else if ok {
		t.Direction = d
	}
	if t.LocalPrefix, _, err = str(m, "local_prefix"); err != nil {
		return t, err
	}
	if t.RemotePrefix, _, err = str(m, "remote_prefix"); err != nil {
		return t, err
	}
	if n, ok, err := number(m, "qos"); err != nil {
		return t, err
	} else if ok {
		if n != 0 && n != 1 && n != 2 {
			return t, fmt.Errorf("qos %v is not 0, 1 or 2", m["qos"])
		}
		t.QoS = byte(n)
	}
	return t, nil
}

// check validates a rule as Mosquitto does: the pattern and prefixes
// make valid filters on both sides, prefixes hold no wildcard, and an
// empty pattern needs a prefix on each side (then the prefixes are whole
// topics).
func (t BridgeTopic) check() error {
	switch t.Direction {
	case DirOut, DirIn, DirBoth:
	default:
		return fmt.Errorf("direction '%s' is not one of out, in, both", t.Direction)
	}
	if strings.ContainsAny(t.LocalPrefix, "+#") || strings.ContainsAny(t.RemotePrefix, "+#") {
		return fmt.Errorf("a prefix must not hold a wildcard (+ or #)")
	}
	if t.Pattern == "" && (t.LocalPrefix == "" || t.RemotePrefix == "") {
		return fmt.Errorf("an empty pattern needs both prefixes (they are then the topics)")
	}
	for _, f := range []string{t.LocalFilter(), t.RemoteFilter()} {
		if err := checkFilter(f); err != nil {
			return err
		}
	}
	return nil
}

// checkFilter validates an MQTT topic filter: + and # alone in their
// level, # last, no NUL, not $share.
func checkFilter(f string) error {
	if f == "" || len(f) > 65535 || strings.ContainsRune(f, 0) {
		return fmt.Errorf("'%s' is not a topic filter", f)
	}
	if strings.HasPrefix(f, "$share/") {
		return fmt.Errorf("'%s': a bridge does not take shared subscriptions", f)
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		if strings.Contains(l, "#") && (l != "#" || i != len(levels)-1) {
			return fmt.Errorf("'%s': # must be a whole last level", f)
		}
		if strings.Contains(l, "+") && l != "+" {
			return fmt.Errorf("'%s': + must be a whole level", f)
		}
	}
	return nil
}

// matchTopic reports whether topic matches filter (MQTT's rules; a
// wildcard at the first level does not match a $ topic).
func matchTopic(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && len(filter) > 0 && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		if !fmore {
			return !tmore
		}
		if !tmore {
			// "a/#" matches "a".
			return frest == "#"
		}
		filter, topic = frest, trest
	}
}

// toRemote maps a local topic to the remote one by the first out rule
// that matches it; ok false if none does.
func (d *BridgeDefinition) toRemote(topic string) (remote string, qos byte, ok bool) {
	for _, t := range d.Topics {
		if t.out() && strings.HasPrefix(topic, t.LocalPrefix) && matchTopic(t.LocalFilter(), topic) {
			return t.RemotePrefix + topic[len(t.LocalPrefix):], t.QoS, true
		}
	}
	return "", 0, false
}

// toLocal maps a remote topic to the local one by the first in rule that
// matches it.
func (d *BridgeDefinition) toLocal(topic string) (local string, ok bool) {
	for _, t := range d.Topics {
		if t.in() && strings.HasPrefix(topic, t.RemotePrefix) && matchTopic(t.RemoteFilter(), topic) {
			return t.LocalPrefix + topic[len(t.RemotePrefix):], true
		}
	}
	return "", false
}

// RedactedBridge returns a copy of a bridge's value with its password
// hidden, as the API shows it.
func RedactedBridge(value map[string]any) map[string]any {
	out := make(map[string]any, len(value))
	for k, v := range value {
		out[k] = v
	}
	if _, ok := out["remote_password"]; ok {
		out["remote_password"] = redactedPassword
	}
	return out
}
