package conf

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "trident.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if c.AMQP.MaxMessageSize != 134217728 || c.AMQP.Listen != ":5672" || c.HTTP.Listen != ":15672" {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

func TestLoadPrecedence(t *testing.T) {
	file := writeFile(t, `
data_dir: /from/file
log:
  level: debug
amqp:
  listen: "127.0.0.1:5000"
  heartbeat: 30s
  frame_max: 8192
mqtt:
  listen: ""
loopback_users: []
`)
	file2 := writeFile(t, "http:\n  listen: \":9999\"\n")

	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c Config)
	}{
		{"defaults", nil, nil, func(t *testing.T, c Config) {
			if !reflect.DeepEqual(c, Default()) {
				t.Errorf("got %+v, want defaults", c)
			}
		}},
		{"file over defaults", []string{"--config", file}, nil, func(t *testing.T, c Config) {
			want := Default()
			want.DataDir = "/from/file"
			want.Log.Level = "debug"
			want.AMQP.Listen = "127.0.0.1:5000"
			want.AMQP.Heartbeat = 30 * time.Second
			want.AMQP.FrameMax = 8192
			want.MQTT.Listen = ""
			want.LoopbackUsers = []string{}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("got  %+v\nwant %+v", c, want)
			}
		}},
		{"TRIDENT_CONFIG names the file", nil, map[string]string{"TRIDENT_CONFIG": file}, func(t *testing.T, c Config) {
			if c.DataDir != "/from/file" {
				t.Errorf("DataDir = %q", c.DataDir)
			}
		}},
		{"--config wins over TRIDENT_CONFIG", []string{"--config", file2}, map[string]string{"TRIDENT_CONFIG": file}, func(t *testing.T, c Config) {
			if c.DataDir != "./data" || c.HTTP.Listen != ":9999" {
				t.Errorf("DataDir = %q, HTTP.Listen = %q", c.DataDir, c.HTTP.Listen)
			}
		}},
		{"env over file", []string{"--config", file}, map[string]string{
			"TRIDENT_DATA_DIR":         "/from/env",
			"TRIDENT_AMQP_HEARTBEAT":   "10s",
			"TRIDENT_LOOPBACK_USERS":   "guest, admin",
			"TRIDENT_AMQP_CHANNEL_MAX": "100",
		}, func(t *testing.T, c Config) {
			if c.DataDir != "/from/env" || c.AMQP.Heartbeat != 10*time.Second || c.AMQP.ChannelMax != 100 {
				t.Errorf("got %+v", c)
			}
			if !reflect.DeepEqual(c.LoopbackUsers, []string{"guest", "admin"}) {
				t.Errorf("LoopbackUsers = %q", c.LoopbackUsers)
			}
			if c.Log.Level != "debug" {
				t.Errorf("file value lost: Log.Level = %q", c.Log.Level)
			}
		}},
		{"flags over env", []string{"--config", file, "--data-dir", "/from/flag", "--amqp-listen=127.0.0.1:0", "--log-format", "json"},
			map[string]string{"TRIDENT_DATA_DIR": "/from/env", "TRIDENT_AMQP_LISTEN": ":6000", "TRIDENT_LOG_LEVEL": "error"},
			func(t *testing.T, c Config) {
				if c.DataDir != "/from/flag" || c.AMQP.Listen != "127.0.0.1:0" || c.Log.Format != "json" {
					t.Errorf("got %+v", c)
				}
				if c.Log.Level != "error" {
					t.Errorf("env value lost: Log.Level = %q", c.Log.Level)
				}
			}},
		{"last flag wins", []string{"--data-dir", "a", "--data-dir", "b"}, nil, func(t *testing.T, c Config) {
			if c.DataDir != "b" {
				t.Errorf("DataDir = %q", c.DataDir)
			}
		}},
		{"flag disables a listener", []string{"--stomp-listen", "", "--default-user", "admin", "--default-pass", "s3cret"}, nil, func(t *testing.T, c Config) {
			if c.STOMP.Listen != "" || c.DefaultUser != "admin" || c.DefaultPass != "s3cret" {
				t.Errorf("got %+v", c)
			}
		}},
		{"single dash flags", []string{"-mqtt-listen", ":1884", "-prometheus-listen", ":0", "-http-listen", "127.0.0.1:15000"}, nil, func(t *testing.T, c Config) {
			if c.MQTT.Listen != ":1884" || c.Prometheus.Listen != ":0" || c.HTTP.Listen != "127.0.0.1:15000" {
				t.Errorf("got %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.args, envMap(tt.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	unknown := writeFile(t, "amqp:\n  listn: \":1\"\n")
	badYAML := writeFile(t, "amqp: [\n")
	badDur := writeFile(t, "amqp:\n  heartbeat: 60\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // substring of the error
	}{
		{"missing file", []string{"--config", "/nonexistent/trident.yaml"}, nil, "conf: config file"},
		{"unknown key", []string{"--config", unknown}, nil, "amqp.listn: unknown key (did you mean amqp.listen?) (line 2)"},
		{"bad yaml", []string{"--config", badYAML}, nil, "conf: config file"},
		{"bare number duration in yaml", []string{"--config", badDur}, nil, `amqp.heartbeat: expected a duration such as 30s or 1m30s, got "60" (line 2)`},
		{"unknown flag", []string{"--nope"}, nil, "flag provided but not defined: -nope"},
		{"bad int flag", []string{"--amqp-frame-max", "big"}, nil, `invalid value "big" for flag -amqp-frame-max`},
		{"bad duration env", nil, map[string]string{"TRIDENT_AMQP_HEARTBEAT": "soon"}, "TRIDENT_AMQP_HEARTBEAT"},
		{"positional arg", []string{"extra"}, nil, `unexpected argument "extra"`},
		{"invalid after merge", []string{"--amqp-listen", "x"}, nil, `conf: amqp.listen "x": missing port`},
		{"invalid from env", nil, map[string]string{"TRIDENT_MQTT_WS_LISTEN": "1.2.3.4"}, `conf: mqtt.ws_listen "1.2.3.4": missing port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.args, envMap(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadHelp(t *testing.T) {
	_, err := Load([]string{"-h"}, nil)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	var buf bytes.Buffer
	Usage(&buf)
	for _, fd := range fields {
		if !strings.Contains(buf.String(), "--"+fd.flag) || !strings.Contains(buf.String(), fd.env) {
			t.Errorf("Usage lacks %s / %s", fd.flag, fd.env)
		}
	}
}

// TestFieldsCoverConfig checks that every leaf of Config has a row in fields,
// so a new field cannot miss its env variable and flag.
func TestFieldsCoverConfig(t *testing.T) {
	var leaves int
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			if ft := t.Field(i).Type; ft.Kind() == reflect.Struct {
				walk(ft)
			} else {
				leaves++
			}
		}
	}
	walk(reflect.TypeOf(Config{}))
	if leaves != len(fields) {
		t.Fatalf("Config has %d leaf fields, fields table has %d", leaves, len(fields))
	}
	// Each row must address a distinct field.
	var c Config
	seen := map[any]string{}
	for _, fd := range fields {
		p := fd.ptr(&c)
		if other, ok := seen[p]; ok {
			t.Errorf("%s and %s address the same field", fd.key, other)
		}
		seen[p] = fd.key
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(c *Config)
		want string // "" means valid
	}{
		{"default", func(c *Config) {}, ""},
		{"listener disabled", func(c *Config) { c.AMQP.Listen = ""; c.MQTT.Listen = ""; c.MQTT.WSListen = "" }, ""},
		{"ephemeral ports may repeat", func(c *Config) { c.AMQP.Listen = "127.0.0.1:0"; c.MQTT.Listen = "127.0.0.1:0" }, ""},
		{"same port on distinct hosts", func(c *Config) { c.AMQP.Listen = "127.0.0.1:7000"; c.MQTT.Listen = "127.0.0.2:7000" }, ""},
		{"zero heartbeat", func(c *Config) { c.AMQP.Heartbeat = 0 }, ""},
		{"ipv6 listen", func(c *Config) { c.AMQP.Listen = "[::1]:5672" }, ""},
		{"missing port", func(c *Config) { c.AMQP.Listen = "x" }, `conf: amqp.listen "x": missing port`},
		{"empty port", func(c *Config) { c.HTTP.Listen = "host:" }, `conf: http.listen "host:": missing port`},
		{"bad port", func(c *Config) { c.STOMP.Listen = ":http" }, `conf: stomp.listen ":http": port "http" is not a number`},
		{"port too big", func(c *Config) { c.STOMP.WSListen = ":70000" }, `conf: stomp.ws_listen ":70000": port "70000"`},
		{"port conflict", func(c *Config) { c.Prometheus.Listen = "127.0.0.1:5672" }, `conf: prometheus.listen "127.0.0.1:5672": port 5672 is also used by amqp.listen`},
		{"empty data dir", func(c *Config) { c.DataDir = "" }, "conf: data_dir: must not be empty"},
		{"bad level", func(c *Config) { c.Log.Level = "loud" }, `conf: log.level: "loud" is not one of`},
		{"bad format", func(c *Config) { c.Log.Format = "xml" }, `conf: log.format: "xml" is not one of text, json`},
		{"small frame", func(c *Config) { c.AMQP.FrameMax = 1024 }, "conf: amqp.frame_max: 1024 is out of range"},
		{"channel max", func(c *Config) { c.AMQP.ChannelMax = 70000 }, "conf: amqp.channel_max: 70000 is out of range"},
		{"heartbeat fraction", func(c *Config) { c.AMQP.Heartbeat = 1500 * time.Millisecond }, "conf: amqp.heartbeat: 1.5s is not a whole number of seconds"},
		{"negative heartbeat", func(c *Config) { c.AMQP.Heartbeat = -time.Second }, "conf: amqp.heartbeat: -1s is out of range"},
		{"huge message", func(c *Config) { c.AMQP.MaxMessageSize = 1 << 30 }, "conf: amqp.max_message_size: 1073741824 is out of range"},
		{"zero handshake", func(c *Config) { c.AMQP.HandshakeTimeout = 0 }, "conf: amqp.handshake_timeout: 0s must be positive"},
		{"no mqtt exchange", func(c *Config) { c.MQTT.Exchange = "" }, "conf: mqtt.exchange: must not be empty"},
		{"no mqtt exchange, mqtt off", func(c *Config) { c.MQTT = MQTT{} }, ""},
		{"no vhost", func(c *Config) { c.DefaultVHost = "" }, "conf: default_vhost: must not be empty"},
		{"user without pass", func(c *Config) { c.DefaultPass = "" }, `conf: default_pass: must not be empty when default_user "guest" is set`},
		{"no default user", func(c *Config) { c.DefaultUser = ""; c.DefaultPass = "" }, ""},
		{"empty loopback user", func(c *Config) { c.LoopbackUsers = []string{"guest", ""} }, "conf: loopback_users[1]: must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	c := Default()
	c.DataDir = ""
	c.AMQP.Listen = "x"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "data_dir") || !strings.Contains(err.Error(), "amqp.listen") {
		t.Fatalf("Validate() = %v, want both problems", err)
	}
}

// TestMQTTAllowAnonymous: mqtt.allow_anonymous is off unless configured
// (RabbitMQ's default is on) and loads from YAML, env and flags.
func TestMQTTAllowAnonymous(t *testing.T) {
	if Default().MQTT.AllowAnonymous {
		t.Fatal("mqtt.allow_anonymous defaults to true")
	}
	file := writeFile(t, "mqtt:\n  allow_anonymous: false\n  default_user: dev\n  default_pass: pw\n")
	c, err := Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MQTT.AllowAnonymous || c.MQTT.DefaultUser != "dev" || c.MQTT.DefaultPass != "pw" {
		t.Fatalf("from file: %+v", c.MQTT)
	}
	c, err = Load(nil, envMap(map[string]string{"TRIDENT_MQTT_ALLOW_ANONYMOUS": "true",
		"TRIDENT_MQTT_DEFAULT_USER": "dev", "TRIDENT_MQTT_DEFAULT_PASS": "pw"}))
	if err != nil || !c.MQTT.AllowAnonymous {
		t.Fatalf("from env: %v %v", c.MQTT.AllowAnonymous, err)
	}
	// Anonymous MQTT needs a user of its own, never the bootstrap user.
	if _, err = Load(nil, envMap(map[string]string{"TRIDENT_MQTT_ALLOW_ANONYMOUS": "true"})); err == nil {
		t.Fatal("mqtt.allow_anonymous without mqtt.default_user accepted")
	}
	if _, err = Load([]string{"--mqtt-allow-anonymous=true", "--mqtt-default-user", "guest", "--mqtt-default-pass", "guest"}, nil); err == nil ||
		!strings.Contains(err.Error(), "bootstrap user") {
		t.Fatalf("mqtt.default_user = default_user: %v", err)
	}
	c, err = Load([]string{"--config", file, "--mqtt-allow-anonymous=true"}, nil)
	if err != nil || !c.MQTT.AllowAnonymous {
		t.Fatalf("flag over file: %v %v", c.MQTT.AllowAnonymous, err)
	}
}
