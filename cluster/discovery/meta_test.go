package discovery

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"
)

var metaGolden = []struct {
	name string
	m    map[string]string
	enc  []byte
}{
	{"empty", nil, nil},
	{"one", map[string]string{"a": "b"}, []byte{1, 1, 'a', 1, 'b'}},
	{"sorted", map[string]string{"raft": "x", "amqp": ""}, []byte{2, 4, 'a', 'm', 'q', 'p', 0, 4, 'r', 'a', 'f', 't', 1, 'x'}},
}

func TestMetaCodec(t *testing.T) {
	for _, c := range metaGolden {
		t.Run(c.name, func(t *testing.T) {
			enc := encodeMeta(c.m)
			if !bytes.Equal(enc, c.enc) {
				t.Fatalf("encode = %v, want %v", enc, c.enc)
			}
			got, err := decodeMeta(enc)
			if err != nil || len(got) != len(c.m) || !maps.Equal(got, c.m) {
				t.Fatalf("decode = %v, %v; want %v", got, err, c.m)
			}
		})
	}
	for _, b := range [][]byte{{1}, {1, 1, 'a'}, {1, 5, 'a', 0}, {0, 0}, {0x80}, {200, 0}} {
		if _, err := decodeMeta(b); !errors.Is(err, errBadMeta) {
			t.Errorf("decodeMeta(%v) = %v, want errBadMeta", b, err)
		}
	}
}

func FuzzMetaCodec(f *testing.F) {
	for _, c := range metaGolden {
		f.Add(c.enc)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		again, err := decodeMeta(encodeMeta(m))
		if err != nil || !maps.Equal(again, m) {
			t.Fatalf("re-encoding %v gives %v, %v", m, again, err)
		}
	})
}

func TestValidate(t *testing.T) {
	ok := Default()
	ok.NodeName = "n1"
	ok.Join = []string{"127.0.0.1:25672", "[::1]:1"}
	ok.Meta = map[string]string{"raft": "127.0.0.1:25673"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want error
	}{
		{"no name", func(c *Config) { c.NodeName = "" }, ErrNoNodeName},
		{"bind host", func(c *Config) { c.BindAddr = "localhost" }, ErrBadAddr},
		{"advertise", func(c *Config) { c.AdvertiseAddr = "x" }, ErrBadAddr},
		{"port", func(c *Config) { c.BindPort = 70000 }, ErrBadAddr},
		{"join without port", func(c *Config) { c.Join = []string{"127.0.0.1"} }, ErrBadAddr},
		{"meta too long", func(c *Config) { c.Meta = map[string]string{"k": strings.Repeat("v", 600)} }, ErrMetaTooLong},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			if err := c.Validate(); !errors.Is(err, tc.want) {
				t.Fatalf("Validate = %v, want %v", err, tc.want)
			}
		})
	}
}
