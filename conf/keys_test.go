package conf

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// keyCases are configuration files with what Load must say of them ("" for
// none): the key path, a close match, the expected type and the line.
var keyCases = []struct {
	name, yaml string
	want       []string
}{
	{"valid", "amqp:\n  listen: \":5672\"\n  heartbeat: 30s\nmqtt:\n  deny_subscribe: [\"#\"]\ncluster:\n  name: eu-1\n", nil},
	{"empty value", "amqp:\n  listen:\n", nil},
	{"empty file", "", nil},
	{"words swapped", "amqp:\n  lisen_tls: \":5671\"\n", []string{"amqp.lisen_tls: unknown key (did you mean amqp.tls_listen?) (line 2)"}},
	{"typo", "mqtt:\n  listn: \":1883\"\n", []string{"mqtt.listn: unknown key (did you mean mqtt.listen?) (line 2)"}},
	{"transposition", "http:\n  stats_intreval: 5s\n", []string{"http.stats_intreval: unknown key (did you mean http.stats_interval?) (line 2)"}},
	{"nested typo", "cluster:\n  tls:\n    ca_fiel: x\n", []string{"cluster.tls.ca_fiel: unknown key (did you mean cluster.tls.ca_file?) (line 3)"}},
	{"no close match", "amqp:\n  zzzzzz: 1\n", []string{"amqp.zzzzzz: unknown key (line 2)"}},
	{"in the wrong section", "tls_listen: \":5671\"\n", []string{"tls_listen: unknown key (did you mean amqp.tls_listen, http.tls_listen, mqtt.tls_listen, prometheus.tls_listen, stomp.tls_listen or stream.tls_listen?) (line 1)"}},
	{"top-level typo", "data_dri: /x\n", []string{"data_dri: unknown key (did you mean data_dir?) (line 1)"}},
	{"not an integer", "amqp:\n  frame_max: big\n", []string{`amqp.frame_max: expected an integer, got "big" (line 2)`}},
	{"not a duration", "amqp:\n  heartbeat: soon\n", []string{`amqp.heartbeat: expected a duration such as 30s or 1m30s, got "soon" (line 2)`}},
	{"not a boolean", "mqtt:\n  allow_anonymous: perhaps\n", []string{`mqtt.allow_anonymous: expected a boolean (true or false), got "perhaps" (line 2)`}},
	{"not a list", "mqtt:\n  deny_subscribe: \"#\"\n", []string{`mqtt.deny_subscribe: expected a list, got "#" (line 2)`}},
	{"list for an integer", "cluster:\n  bootstrap_expect: [1]\n", []string{"cluster.bootstrap_expect: expected an integer, got a list (line 2)"}},
	{"list for a section", "http: [1]\n", []string{"http: expected a mapping of settings, got a list (line 1)"}},
	{"list item", "loopback_users: [guest, {a: b}]\n", []string{"loopback_users[1]: expected a string, got a mapping (line 1)"}},
	{"several", "amqp:\n  frame_max: x\nzzzz: 1\n", []string{`amqp.frame_max: expected an integer, got "x" (line 2)`, "zzzz: unknown key (line 3)"}},
	{"alias", "base: &b\n  listen: \":1\"\namqp: *b\n", []string{"base: unknown key (line 1)"}},
	{"merge list", "x: &a {listen: \":1\"}\namqp:\n  <<: [*a, {frame_max: 4096}]\n", []string{"x: unknown key (line 1)"}},
	{"merge key", "amqp:\n  <<: {listen: \":1\", lisen: 2}\n", []string{"amqp.lisen: unknown key (did you mean amqp.listen?) (line 2)"}},
}

// TestConfigKeyErrors: Load names the key path of an unknown key (with a
// close match when there is one) and of a value of the wrong type, with
// the expected type and the line.
func TestConfigKeyErrors(t *testing.T) {
	for _, tc := range keyCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]string{"--config", writeFile(t, tc.yaml)}, nil)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load took it; want %q", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")[1:] // after "conf: config file X:"
			if strings.Join(lines, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(tc.want, "\n"))
			}
			if strings.Contains(err.Error(), "conf.") || strings.Contains(err.Error(), "type ") {
				t.Errorf("the error names Go types: %v", err)
			}
		})
	}
}

func TestClosest(t *testing.T) {
	for _, tc := range []struct {
		key, want string
		cands     []string
	}{
		{"lisen_tls", "tls_listen", []string{"listen", "tls_listen", "frame_max"}},
		{"listn", "listen", []string{"listen", "tls_listen"}},
		{"lsiten", "listen", []string{"listen"}},
		{"log", "", []string{"tls"}},
		{"a", "", []string{"b"}},
		{"frame", "", []string{"frame_max"}},
	} {
		if got := closest(tc.key, tc.cands); got != tc.want {
			t.Errorf("closest(%q, %q) = %q, want %q", tc.key, tc.cands, got, tc.want)
		}
	}
}

// FuzzCheckKeys: checkKeys never panics, and never refuses a document
// that the strict decoder (which decides what is loaded) accepts.
func FuzzCheckKeys(f *testing.F) {
	for _, tc := range keyCases {
		f.Add([]byte(tc.yaml))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) != nil {
			return
		}
		kerr := checkKeys(&doc)
		cfg := Default()
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		derr := dec.Decode(&cfg)
		if errors.Is(derr, io.EOF) {
			derr = nil
		}
		if kerr != nil && derr == nil {
			t.Fatalf("checkKeys refuses what the decoder takes: %v\n%q", kerr, data)
		}
	})
}
