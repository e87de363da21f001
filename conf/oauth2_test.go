package conf

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOAuth2Config(t *testing.T) {
	d := Default()
	if d.OAuth2.Enabled() || !d.OAuth2.VerifyAud || !d.OAuth2.RequireExp || d.OAuth2.FetchTimeout != 2*time.Second ||
		!reflect.DeepEqual(d.OAuth2.PreferredUsernameClaims, []string{"sub", "client_id"}) || len(d.Auth.Backends) != 0 {
		t.Fatalf("defaults: %+v %+v", d.OAuth2, d.Auth)
	}
	env := map[string]string{"TRIDENT_OAUTH2_RESOURCE_SERVER_ID": "rabbitmq", "TRIDENT_OAUTH2_JWKS_URL": "https://idp/jwks"}
	c, err := Load([]string{"--oauth2-scope-aliases", "admin=rabbitmq.tag:administrator rabbitmq.read:*/*, dev=rabbitmq.read:dev/*",
		"--auth-backends", "internal,oauth2", "--oauth2-verify-aud=false"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"admin": "rabbitmq.tag:administrator rabbitmq.read:*/*", "dev": "rabbitmq.read:dev/*"}
	if !reflect.DeepEqual(c.OAuth2.ScopeAliases, want) || !reflect.DeepEqual(c.Auth.Backends, []string{"internal", "oauth2"}) ||
		c.OAuth2.VerifyAud || c.OAuth2.JWKSURL != "https://idp/jwks" {
		t.Fatalf("loaded %+v %+v", c.OAuth2, c.Auth)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--auth-backends", "oauth2"}, "auth.backends: lists oauth2 but oauth2.resource_server_id is empty"},
		{[]string{"--auth-backends", "ldap"}, `auth.backends: "ldap" is not one of internal, oauth2`},
		{[]string{"--oauth2-resource-server-id", "r"}, "needs a key source"},
		{[]string{"--oauth2-resource-server-id", "r", "--oauth2-issuer", "https://i", "--oauth2-algorithms", "none"}, `"none" is not a supported JWS algorithm`},
		{[]string{"--http-oauth-enabled", "true"}, "http.oauth_enabled: needs oauth2.resource_server_id"},
		{[]string{"--oauth2-scope-aliases", "novalue"}, "is not a list of key=value"},
	} {
		if _, err := Load(tt.args, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want %q", tt.args, err, tt.want)
		}
	}
}
