package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTLSDefaultsOff(t *testing.T) {
	c := Default()
	if c.TLS.Enabled() {
		t.Fatal("TLS enabled by default")
	}
	if c.AMQP.TLSListen != ":5671" || c.MQTT.TLSListen != ":8883" || c.STOMP.TLSListen != ":61614" ||
		c.HTTP.TLSListen != ":15671" || c.Prometheus.TLSListen != ":15691" ||
		c.MQTT.WSSListen != ":15676" || c.STOMP.WSSListen != ":15673" {
		t.Fatalf("TLS ports are not RabbitMQ's: %+v %+v %+v", c.AMQP, c.MQTT, c.STOMP)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// Disabled TLS listeners never conflict with anything.
	c.AMQP.Listen = ":5671"
	if err := c.Validate(); err != nil {
		t.Fatalf("disabled TLS listener conflicts: %v", err)
	}
	c.TLS.CertFile, c.TLS.KeyFile = "c.pem", "k.pem"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "amqp.tls_listen") {
		t.Fatalf("enabled TLS listener on the AMQP port: %v", err)
	}
}

func TestTLSLoadYAMLEnvFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "trident.yaml")
	yaml := `
tls:
  cert_file: /etc/trident/server.pem
  key_file: /etc/trident/server.key
  ca_file: /etc/trident/ca.pem
  verify: verify_peer
  fail_if_no_peer_cert: true
  cert_login_from: subject_alternative_name
  cert_login_san_type: email
amqp:
  tls_listen: ":5999"
mqtt:
  cert_login: true
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TRIDENT_STOMP_CERT_LOGIN": "true"}
	c, err := Load([]string{"--config", file, "--tls-min-version", "1.3"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := TLS{CertFile: "/etc/trident/server.pem", KeyFile: "/etc/trident/server.key", CAFile: "/etc/trident/ca.pem",
		Verify: "verify_peer", FailIfNoPeerCert: true, CertLoginFrom: "subject_alternative_name",
		CertLoginSANType: "email", MinVersion: "1.3"}
	if c.TLS != want {
		t.Fatalf("tls %+v, want %+v", c.TLS, want)
	}
	if c.AMQP.TLSListen != ":5999" || !c.MQTT.CertLogin || !c.STOMP.CertLogin {
		t.Fatalf("amqp.tls_listen %q mqtt.cert_login %v stomp.cert_login %v", c.AMQP.TLSListen, c.MQTT.CertLogin, c.STOMP.CertLogin)
	}
	if _, err := Load([]string{"--mqtt-cert-login", "maybe"}, nil); err == nil || !strings.Contains(err.Error(), "boolean") {
		t.Fatalf("bad boolean flag: %v", err)
	}
	var sb strings.Builder
	Usage(&sb)
	if !strings.Contains(sb.String(), "--tls-fail-if-no-peer-cert") || !strings.Contains(sb.String(), "false") {
		t.Fatalf("usage lacks the TLS flags:\n%s", sb.String())
	}
}

func TestTLSValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*TLS)
		key    string
	}{
		{"verify", func(t *TLS) { t.Verify = "maybe" }, "tls.verify"},
		{"login from", func(t *TLS) { t.CertLoginFrom = "distinguished_name" }, "tls.cert_login_from"},
		{"san type", func(t *TLS) { t.CertLoginSANType = "uri" }, "tls.cert_login_san_type"},
		{"min version", func(t *TLS) { t.MinVersion = "1.1" }, "tls.min_version"},
		{"fail without verify", func(t *TLS) { t.FailIfNoPeerCert = true }, "tls.fail_if_no_peer_cert"},
		{"key without cert", func(t *TLS) { t.KeyFile = "k.pem" }, "tls.cert_file"},
		{"cert without key", func(t *TLS) { t.CertFile = "c.pem" }, "tls.key_file"},
		{"verify_peer without CA", func(t *TLS) { t.CertFile, t.KeyFile, t.Verify = "c.pem", "k.pem", "verify_peer" }, "tls.ca_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(&c.TLS)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("got %v, want an error naming %s", err, tc.key)
			}
		})
	}
	c := Default()
	c.TLS = TLS{CertFile: "c.pem", KeyFile: "k.pem", CAFile: "ca.pem", Verify: "verify_peer", FailIfNoPeerCert: true,
		CertLoginFrom: "common_name", CertLoginSANType: "dns", MinVersion: "1.2"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.TLS.Verify = "none" // RabbitMQ's verify_none, short
	c.TLS.FailIfNoPeerCert = false
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
