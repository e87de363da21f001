package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStreamConfig(t *testing.T) {
	d := Default()
	if d.Stream.Listen != ":5552" || d.Stream.TLSListen != ":5551" || d.Stream.InitialFrameMax != 8192 {
		t.Fatalf("defaults %+v, want RabbitMQ's ports and an 8 KiB pre-open bound", d.Stream)
	}
	env := map[string]string{"TRIDENT_STREAM_ADVERTISED_HOST": "broker.example.com"}
	c, err := Load([]string{"--stream-listen", "127.0.0.1:15552", "--stream-advertised-port", "30552"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Stream.Listen != "127.0.0.1:15552" || c.Stream.AdvertisedHost != "broker.example.com" || c.Stream.AdvertisedPort != 30552 {
		t.Fatalf("loaded %+v", c.Stream)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("stream:\n  listen: \"\"\n  heartbeat: 30s\n  advertised_tls_port: 443\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err = Load([]string{"--config", file}, nil); err != nil {
		t.Fatal(err)
	}
	if c.Stream.Listen != "" || c.Stream.Heartbeat != 30*time.Second || c.Stream.AdvertisedTLSPort != 443 {
		t.Fatalf("from YAML %+v", c.Stream)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--stream-initial-frame-max", "100"}, "stream.initial_frame_max: 100 must be between 1024 and stream.frame_max"},
		{[]string{"--stream-frame-max", "10"}, "stream.frame_max: 10 must be between"},
		{[]string{"--stream-heartbeat", "10ms"}, "stream.heartbeat: 10ms must be 0 or at least 1s"},
		{[]string{"--stream-advertised-port", "70000"}, "stream.advertised_port: 70000 is not a port"},
		{[]string{"--stream-advertised-host", "a b"}, "stream.advertised_host"},
	} {
		if _, err := Load(tt.args, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
}
