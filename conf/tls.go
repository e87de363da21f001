package conf

import "fmt"

// TLS configures every TLS listener (amqp.tls_listen, mqtt.tls_listen,
// mqtt.wss_listen, stomp.tls_listen, stomp.wss_listen, http.tls_listen,
// prometheus.tls_listen) as RabbitMQ's ssl_options do. The TLS listeners
// are started only when CertFile is set. The certificate, key and CA files
// are re-read when they change (checked at most once a second, on a new
// connection) and on SIGHUP; open connections keep the certificate they
// were made with.
type TLS struct {
	// CertFile and KeyFile are the server's PEM certificate (chain) and
	// private key.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// CAFile holds the PEM CA certificates client certificates are
	// verified against; required by verify_peer.
	CAFile string `yaml:"ca_file"`
	// Verify is verify_none (or none) or verify_peer: whether a client
	// certificate is asked for and verified.
	Verify string `yaml:"verify"`
	// FailIfNoPeerCert refuses clients without a certificate (with
	// verify_peer); otherwise a client may connect without one and log in
	// with a password.
	FailIfNoPeerCert bool `yaml:"fail_if_no_peer_cert"`
	// CertLoginFrom is where certificate login (AMQP EXTERNAL, MQTT and
	// STOMP cert_login) takes the user name from: common_name or
	// subject_alternative_name (RabbitMQ's ssl_cert_login_from).
	CertLoginFrom string `yaml:"cert_login_from"`
	// CertLoginSANType picks the subject alternative name used with
	// subject_alternative_name: dns or email (the first of that type).
	CertLoginSANType string `yaml:"cert_login_san_type"`
	// MinVersion is the lowest TLS version accepted: 1.2 or 1.3.
	MinVersion string `yaml:"min_version"`
}

// DefaultTLS returns the TLS defaults: no certificate (TLS listeners
// off), no client verification, login from the common name, TLS 1.2 and up.
func DefaultTLS() TLS {
	return TLS{Verify: "verify_none", CertLoginFrom: "common_name", CertLoginSANType: "dns", MinVersion: "1.2"}
}

// Enabled reports whether the TLS listeners are started.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// VerifyPeer reports whether client certificates are requested and verified.
func (t TLS) VerifyPeer() bool { return t.Verify == "verify_peer" }

// tlsFields are the TLS leaves of Config, for load.go's fields table.
var tlsFields = []field{
	f("amqp.tls_listen", "AMQPS listen address (needs tls.cert_file; empty disables)", func(c *Config) any { return &c.AMQP.TLSListen }),
	f("mqtt.tls_listen", "MQTTS listen address (needs tls.cert_file; empty disables)", func(c *Config) any { return &c.MQTT.TLSListen }),
	f("mqtt.wss_listen", "MQTT over secure WebSocket listen address (needs tls.cert_file; empty disables)", func(c *Config) any { return &c.MQTT.WSSListen }),
	f("mqtt.cert_login", "MQTT clients without username log in as their certificate's user", func(c *Config) any { return &c.MQTT.CertLogin }),
	f("stomp.tls_listen", "STOMP over TLS listen address (needs tls.cert_file; empty disables)", func(c *Config) any { return &c.STOMP.TLSListen }),
	f("stomp.wss_listen", "STOMP over secure WebSocket listen address (needs tls.cert_file; empty disables)", func(c *Config) any { return &c.STOMP.WSSListen }),
	f("stomp.cert_login", "STOMP clients without login log in as their certificate's user", func(c *Config) any { return &c.STOMP.CertLogin }),
	f("http.tls_listen", "management HTTPS listen address (needs tls.cert_file; empty disables)", func(c *Config) any { return &c.HTTP.TLSListen }),
	f("prometheus.tls_listen", "Prometheus HTTPS listen address (needs tls.cert_file; empty disables)", func(c *Config) any { return &c.Prometheus.TLSListen }),
	f("tls.cert_file", "PEM server certificate; set to enable the TLS listeners", func(c *Config) any { return &c.TLS.CertFile }),
	f("tls.key_file", "PEM private key of tls.cert_file", func(c *Config) any { return &c.TLS.KeyFile }),
	f("tls.ca_file", "PEM CA certificates that verify client certificates", func(c *Config) any { return &c.TLS.CAFile }),
	f("tls.verify", "client certificates: verify_none or verify_peer", func(c *Config) any { return &c.TLS.Verify }),
	f("tls.fail_if_no_peer_cert", "with verify_peer, refuse clients without a certificate", func(c *Config) any { return &c.TLS.FailIfNoPeerCert }),
	f("tls.cert_login_from", "certificate login user from: common_name or subject_alternative_name", func(c *Config) any { return &c.TLS.CertLoginFrom }),
	f("tls.cert_login_san_type", "subject alternative name type for cert login: dns or email", func(c *Config) any { return &c.TLS.CertLoginSANType }),
	f("tls.min_version", "lowest TLS version accepted: 1.2 or 1.3", func(c *Config) any { return &c.TLS.MinVersion }),
}

// tlsListeners returns the TLS listeners by YAML key, or none when TLS is
// off (their default addresses then bind nothing).
func (c *Config) tlsListeners() []struct{ key, addr string } {
	if !c.TLS.Enabled() {
		return nil
	}
	return []struct{ key, addr string }{
		{"amqp.tls_listen", c.AMQP.TLSListen},
		{"mqtt.tls_listen", c.MQTT.TLSListen},
		{"mqtt.wss_listen", c.MQTT.WSSListen},
		{"stomp.tls_listen", c.STOMP.TLSListen},
		{"stomp.wss_listen", c.STOMP.WSSListen},
		{"http.tls_listen", c.HTTP.TLSListen},
		{"prometheus.tls_listen", c.Prometheus.TLSListen},
	}
}

// validateTLS checks the tls section.
func (c *Config) validateTLS() []error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("conf: %s: %s", key, fmt.Sprintf(format, args...)))
	}
	t := c.TLS
	switch t.Verify {
	case "verify_none", "none", "verify_peer":
	default:
		bad("tls.verify", "%q is not one of verify_none, verify_peer", t.Verify)
	}
	switch t.CertLoginFrom {
	case "common_name", "subject_alternative_name":
	default:
		bad("tls.cert_login_from", "%q is not one of common_name, subject_alternative_name", t.CertLoginFrom)
	}
	switch t.CertLoginSANType {
	case "dns", "email":
	default:
		bad("tls.cert_login_san_type", "%q is not one of dns, email", t.CertLoginSANType)
	}
	switch t.MinVersion {
	case "1.2", "1.3":
	default:
		bad("tls.min_version", "%q is not one of 1.2, 1.3", t.MinVersion)
	}
	if t.FailIfNoPeerCert && !t.VerifyPeer() {
		bad("tls.fail_if_no_peer_cert", "needs tls.verify verify_peer")
	}
	if !t.Enabled() {
		if t.KeyFile != "" {
			bad("tls.cert_file", "must be set when tls.key_file is")
		}
		return errs
	}
	if t.KeyFile == "" {
		bad("tls.key_file", "must be set when tls.cert_file is")
	}
	if t.VerifyPeer() && t.CAFile == "" {
		bad("tls.ca_file", "must be set with tls.verify verify_peer")
	}
	return errs
}
