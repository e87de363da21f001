package conf

import (
	"time"
)

// Audit configures the audit log: authentication successes and failures,
// permission and user changes, object creation and deletion and who did
// them, as JSON lines.
type Audit struct {
	// File is the sink: a file path (appended to), "stderr", or empty for
	// no audit log.
	File string `yaml:"file"`
}

// Auth configures login protection.
type Auth struct {
	// FailedLoginLimit failed logins from one source address block it for
	// FailedLoginBackoff, for every protocol and the HTTP API. Negative
	// disables the limit.
	FailedLoginLimit   int           `yaml:"failed_login_limit"`
	FailedLoginBackoff time.Duration `yaml:"failed_login_backoff"`
	// Backends is the ordered list of authentication backends, as
	// RabbitMQ's auth_backends: "internal" (the user database) and
	// "oauth2" (tokens, see OAuth2). Empty: oauth2 then internal when
	// OAuth 2 is configured, internal alone otherwise.
	Backends []string `yaml:"backends"`
}

// Encryption configures encryption at rest of the store.
type Encryption struct {
	// KeyFile holds the AES key (16, 24 or 32 bytes, raw or hex) the store
	// is encrypted with; empty: not encrypted.
	KeyFile string `yaml:"key_file"`
	// RotateTo, if set, makes trident rewrite the whole store from
	// KeyFile's key (none if empty: this encrypts a plain store) into a
	// fresh store encrypted with this file's key, crash-safely, and exit
	// (--rotate-encryption-key NEWKEYFILE). Then start with key_file set
	// to the new file: the old key reads nothing of the store any more.
	// Key files readable or writable by group or others are warned about.
	RotateTo string `yaml:"rotate_to"`
}

// DefaultAuth returns the login protection defaults: 10 failures, then
// 30 seconds of back-off.
func DefaultAuth() Auth {
	return Auth{FailedLoginLimit: 10, FailedLoginBackoff: 30 * time.Second}
}

// securityFields are the audit, auth and encryption leaves of Config.
var securityFields = []field{
	f("audit.file", "audit log sink: file path, stderr, or empty (off)", func(c *Config) any { return &c.Audit.File }),
	f("auth.failed_login_limit", "failed logins from one address before it is blocked (negative: no limit)", func(c *Config) any { return &c.Auth.FailedLoginLimit }),
	f("auth.failed_login_backoff", "how long an address is blocked after too many failed logins", func(c *Config) any { return &c.Auth.FailedLoginBackoff }),
	f("encryption.key_file", "AES key file (16/24/32 bytes, raw or hex) encrypting the store (empty: off)", func(c *Config) any { return &c.Encryption.KeyFile }),
	{key: "encryption.rotate_to", env: "TRIDENT_ROTATE_ENCRYPTION_KEY", flag: "rotate-encryption-key",
		usage: "rewrite the store encrypted with this key file (from encryption.key_file's key, or from plain text when unset), then exit",
		ptr:   func(c *Config) any { return &c.Encryption.RotateTo }},
}

func (c *Config) validateSecurity(bad func(key string, format string, args ...any)) {
	if c.Auth.FailedLoginLimit > 0 && c.Auth.FailedLoginBackoff <= 0 {
		bad("auth.failed_login_backoff", "%s must be positive", c.Auth.FailedLoginBackoff)
	}
	if c.Encryption.RotateTo != "" && c.Encryption.RotateTo == c.Encryption.KeyFile {
		bad("encryption.rotate_to", "is the same file as encryption.key_file")
	}
}
