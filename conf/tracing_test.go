package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTracingConfig(t *testing.T) {
	d := Default()
	if d.Tracing != (Tracing{}) {
		t.Fatalf("tracing is on by default: %+v", d.Tracing)
	}
	env := map[string]string{"TRIDENT_TRACING_SAMPLE_RATIO": "0.25", "TRIDENT_TRACING_PROTOCOL": "grpc"}
	c, err := Load([]string{"--tracing-enabled", "true", "--tracing-endpoint", "http://collector:4317"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if want := (Tracing{Enabled: true, Endpoint: "http://collector:4317", Protocol: "grpc", SampleRatio: 0.25}); c.Tracing != want {
		t.Fatalf("loaded %+v, want %+v", c.Tracing, want)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("tracing:\n  enabled: true\n  sample_ratio: 1\n  protocol: http/protobuf\n  service_name: edge\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err = Load([]string{"--config", file}, nil); err != nil {
		t.Fatal(err)
	}
	if want := (Tracing{Enabled: true, SampleRatio: 1, Protocol: "http/protobuf", ServiceName: "edge"}); c.Tracing != want {
		t.Fatalf("from YAML %+v, want %+v", c.Tracing, want)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--tracing-sample-ratio", "1.5"}, "tracing.sample_ratio: 1.5 must be between 0 and 1"},
		{[]string{"--tracing-sample-ratio", "half"}, `"half" is not a number`},
		{[]string{"--tracing-protocol", "http/json"}, `tracing.protocol: "http/json" must be grpc or http/protobuf`},
		{[]string{"--tracing-endpoint", "collector:4318"}, "tracing.endpoint"},
	} {
		if _, err := Load(tt.args, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want %q", tt.args, err, tt.want)
		}
	}
}
