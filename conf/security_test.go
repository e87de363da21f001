package conf

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSecurityFields(t *testing.T) {
	d := Default()
	if d.Audit.File != "" || d.Encryption.KeyFile != "" || !reflect.DeepEqual(d.Auth, DefaultAuth()) {
		t.Fatalf("defaults: %+v %+v %+v", d.Audit, d.Encryption, d.Auth)
	}
	env := map[string]string{"TRIDENT_AUDIT_FILE": "stderr", "TRIDENT_AUTH_FAILED_LOGIN_LIMIT": "5"}
	c, err := Load([]string{"--auth-failed-login-backoff", "1m", "--encryption-key-file", "/k",
		"--rotate-encryption-key", "/k2"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Audit.File != "stderr" || c.Auth.FailedLoginLimit != 5 || c.Auth.FailedLoginBackoff != time.Minute ||
		c.Encryption.KeyFile != "/k" || c.Encryption.RotateTo != "/k2" {
		t.Fatalf("loaded %+v %+v %+v", c.Audit, c.Auth, c.Encryption)
	}
	if _, err := Load([]string{"--encryption-key-file", "/k", "--rotate-encryption-key", "/k"}, nil); err == nil ||
		!strings.Contains(err.Error(), "encryption.rotate_to") {
		t.Fatalf("same key file: %v", err)
	}
	if _, err := Load([]string{"--auth-failed-login-backoff", "0s"}, nil); err == nil ||
		!strings.Contains(err.Error(), "auth.failed_login_backoff") {
		t.Fatalf("zero backoff: %v", err)
	}
	var b strings.Builder
	Usage(&b)
	for _, s := range []string{"--audit-file", "--rotate-encryption-key", "TRIDENT_ROTATE_ENCRYPTION_KEY", "auth.failed_login_limit"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("Usage lacks %s", s)
		}
	}
}
