package conf

import (
	"slices"
	"time"
)

// OAuth2 configures OAuth 2 / OpenID Connect access tokens (JWTs) as
// credentials, with RabbitMQ's rabbitmq_auth_backend_oauth2 settings
// (auth_oauth2.* there, oauth2.* here). It is off while
// ResourceServerID is empty. A token is accepted as the password of AMQP
// PLAIN (any user name), MQTT CONNECT and STOMP CONNECT, and as
// "Authorization: Bearer" by the HTTP API.
type OAuth2 struct {
	// ResourceServerID is the audience tokens must carry and the prefix
	// of the scopes that are ours ("<id>.read:*/*").
	ResourceServerID string `yaml:"resource_server_id"`
	// Issuer, when set, must be the tokens' iss; with no other key
	// source, keys come from its discovery document
	// (<issuer>/.well-known/openid-configuration → jwks_uri).
	Issuer string `yaml:"issuer"`
	// DiscoveryURL overrides where the discovery document is.
	DiscoveryURL string `yaml:"discovery_url"`
	// JWKSURL is fetched at start and again when a token names an
	// unknown key id (RabbitMQ's jwks_url).
	JWKSURL string `yaml:"jwks_url"`
	// JWKSFile is a local JWKS JSON file.
	JWKSFile string `yaml:"jwks_file"`
	// SigningKeys maps key ids to PEM files of public keys or certificates
	// (RabbitMQ's signing_keys). Env and flag form: "kid=/path,kid2=/path".
	SigningKeys map[string]string `yaml:"signing_keys"`
	// SymmetricKeyFile holds a raw HS256 key (the only way HS256 is
	// accepted), with key id SymmetricKeyID (empty: tokens without kid).
	SymmetricKeyFile string `yaml:"symmetric_key_file"`
	SymmetricKeyID   string `yaml:"symmetric_key_id"`
	// DefaultKey is the key id for tokens without kid.
	DefaultKey string `yaml:"default_key"`
	// Algorithms accepted; empty: RS256, PS256, ES256 (+HS256 with a
	// symmetric key).
	Algorithms []string `yaml:"algorithms"`
	// VerifyAud requires aud to contain ResourceServerID.
	VerifyAud bool `yaml:"verify_aud"`
	// RequireExp refuses tokens without exp.
	RequireExp bool `yaml:"require_exp"`
	// ScopePrefix replaces "<resource_server_id>." as the scope prefix.
	ScopePrefix string `yaml:"scope_prefix"`
	// PreferredUsernameClaims: the user name is the first of these claims
	// the token has.
	PreferredUsernameClaims []string `yaml:"preferred_username_claims"`
	// AdditionalScopesKey names claims (space-separated, dotted paths)
	// holding more scopes; ExtraScopesSource is its older RabbitMQ name,
	// used when it is empty.
	AdditionalScopesKey string `yaml:"additional_scopes_key"`
	ExtraScopesSource   string `yaml:"extra_scopes_source"`
	// ScopePatternSyntax is wildcard (RabbitMQ's default) or regex: the
	// parts of a scope are then regular expressions (RE2) matched against
	// the whole name.
	ScopePatternSyntax string `yaml:"scope_pattern_syntax"`
	// ScopeAliases maps a scope value (a role, say) to the
	// space-separated scopes it stands for. Env and flag form:
	// "alias=scope scope,alias2=scope".
	ScopeAliases map[string]string `yaml:"scope_aliases"`
	// FetchTimeout bounds a JWKS or discovery fetch, and so how long a
	// login with an unknown key id can wait.
	FetchTimeout time.Duration `yaml:"fetch_timeout"`
	// MinRefreshInterval is the least time between two key fetches
	// caused by unknown key ids.
	MinRefreshInterval time.Duration `yaml:"min_refresh_interval"`
	// CACertFile verifies the provider's HTTPS certificate (empty: the
	// system's roots).
	CACertFile string `yaml:"ca_cert_file"`
}

// Enabled reports whether tokens are accepted.
func (o OAuth2) Enabled() bool { return o.ResourceServerID != "" }

// DefaultOAuth2 returns the OAuth 2 defaults: off, and once on, aud and
// exp required, keys fetched within 2s, at most every 5s on unknown kids,
// user name from sub then client_id.
func DefaultOAuth2() OAuth2 {
	return OAuth2{VerifyAud: true, RequireExp: true, FetchTimeout: 2 * time.Second, MinRefreshInterval: 5 * time.Second, ScopePatternSyntax: "wildcard",
		PreferredUsernameClaims: []string{"sub", "client_id"}}
}

var oauth2Fields = []field{
	f("auth.backends", "ordered authentication backends: internal, oauth2 (empty: oauth2,internal when oauth2 is on, else internal)", func(c *Config) any { return &c.Auth.Backends }),
	f("oauth2.resource_server_id", "OAuth 2 resource server id: tokens' audience and scope prefix (empty: OAuth 2 off)", func(c *Config) any { return &c.OAuth2.ResourceServerID }),
	f("oauth2.issuer", "required token issuer; also the OpenID discovery base when no key source is set", func(c *Config) any { return &c.OAuth2.Issuer }),
	f("oauth2.discovery_url", "OpenID discovery document URL (overrides <issuer>/.well-known/openid-configuration)", func(c *Config) any { return &c.OAuth2.DiscoveryURL }),
	f("oauth2.jwks_url", "JWKS URL of the signing keys", func(c *Config) any { return &c.OAuth2.JWKSURL }),
	f("oauth2.jwks_file", "JWKS file of the signing keys", func(c *Config) any { return &c.OAuth2.JWKSFile }),
	f("oauth2.signing_keys", "PEM public keys or certificates by key id: kid=file,kid2=file", func(c *Config) any { return &c.OAuth2.SigningKeys }),
	f("oauth2.symmetric_key_file", "file holding a raw HS256 key (enables HS256)", func(c *Config) any { return &c.OAuth2.SymmetricKeyFile }),
	f("oauth2.symmetric_key_id", "key id of the HS256 key (empty: tokens without kid)", func(c *Config) any { return &c.OAuth2.SymmetricKeyID }),
	f("oauth2.default_key", "key id used for tokens without kid", func(c *Config) any { return &c.OAuth2.DefaultKey }),
	f("oauth2.algorithms", "accepted signature algorithms (empty: RS256,PS256,ES256, +HS256 with a symmetric key)", func(c *Config) any { return &c.OAuth2.Algorithms }),
	f("oauth2.verify_aud", "require the resource server id in aud", func(c *Config) any { return &c.OAuth2.VerifyAud }),
	f("oauth2.require_exp", "refuse tokens without exp", func(c *Config) any { return &c.OAuth2.RequireExp }),
	f("oauth2.scope_prefix", "scope prefix (empty: <resource_server_id>.)", func(c *Config) any { return &c.OAuth2.ScopePrefix }),
	f("oauth2.preferred_username_claims", "claims naming the user, first present wins", func(c *Config) any { return &c.OAuth2.PreferredUsernameClaims }),
	f("oauth2.additional_scopes_key", "claims (space-separated dotted paths) holding more scopes", func(c *Config) any { return &c.OAuth2.AdditionalScopesKey }),
	f("oauth2.extra_scopes_source", "older name of oauth2.additional_scopes_key", func(c *Config) any { return &c.OAuth2.ExtraScopesSource }),
	f("oauth2.scope_pattern_syntax", "scope patterns: wildcard or regex", func(c *Config) any { return &c.OAuth2.ScopePatternSyntax }),
	f("oauth2.scope_aliases", "scope aliases: alias=scope scope,alias2=scope", func(c *Config) any { return &c.OAuth2.ScopeAliases }),
	f("oauth2.fetch_timeout", "longest JWKS or discovery fetch (and wait of a login for a key)", func(c *Config) any { return &c.OAuth2.FetchTimeout }),
	f("oauth2.min_refresh_interval", "least time between key fetches caused by unknown key ids", func(c *Config) any { return &c.OAuth2.MinRefreshInterval }),
	f("oauth2.ca_cert_file", "CA certificates verifying the provider's HTTPS (empty: system roots)", func(c *Config) any { return &c.OAuth2.CACertFile }),
	f("http.oauth_enabled", "the management UI offers OAuth 2 login (authorization code + PKCE)", func(c *Config) any { return &c.HTTP.OAuthEnabled }),
	f("http.oauth_client_id", "OAuth 2 client id of the management UI", func(c *Config) any { return &c.HTTP.OAuthClientID }),
	f("http.oauth_client_secret", "OAuth 2 client secret of the management UI (empty: public client)", func(c *Config) any { return &c.HTTP.OAuthClientSecret }),
	f("http.oauth_provider_url", "OAuth 2 provider (issuer) URL of the UI login (empty: oauth2.issuer)", func(c *Config) any { return &c.HTTP.OAuthProviderURL }),
	f("http.oauth_scopes", "scopes the UI asks for, space-separated (empty: openid profile <resource_server_id>.tag:administrator)", func(c *Config) any { return &c.HTTP.OAuthScopes }),
}

func (c *Config) validateOAuth2(bad func(key string, format string, args ...any)) {
	o := c.OAuth2
	for _, b := range c.Auth.Backends {
		switch b {
		case "internal", "rabbit_auth_backend_internal":
		case "oauth2", "rabbit_auth_backend_oauth2":
			if !o.Enabled() {
				bad("auth.backends", "lists oauth2 but oauth2.resource_server_id is empty")
			}
		default:
			bad("auth.backends", "%q is not one of internal, oauth2", b)
		}
	}
	if !o.Enabled() {
		if c.HTTP.OAuthEnabled {
			bad("http.oauth_enabled", "needs oauth2.resource_server_id")
		}
		return
	}
	if o.JWKSURL == "" && o.JWKSFile == "" && len(o.SigningKeys) == 0 && o.SymmetricKeyFile == "" && o.Issuer == "" && o.DiscoveryURL == "" {
		bad("oauth2.resource_server_id", "needs a key source: oauth2.jwks_url, jwks_file, signing_keys, symmetric_key_file, issuer or discovery_url")
	}
	if o.ScopePatternSyntax != "wildcard" && o.ScopePatternSyntax != "regex" {
		bad("oauth2.scope_pattern_syntax", "%q is not one of wildcard, regex", o.ScopePatternSyntax)
	}
	if o.FetchTimeout <= 0 {
		bad("oauth2.fetch_timeout", "%s must be positive", o.FetchTimeout)
	}
	if o.MinRefreshInterval < 0 {
		bad("oauth2.min_refresh_interval", "%s must not be negative", o.MinRefreshInterval)
	}
	for _, a := range o.Algorithms {
		if !slices.Contains([]string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "HS256", "HS384", "HS512"}, a) {
			bad("oauth2.algorithms", "%q is not a supported JWS algorithm", a)
		}
	}
	if c.HTTP.OAuthEnabled && c.HTTP.OAuthClientID == "" {
		bad("http.oauth_client_id", "is needed with http.oauth_enabled")
	}
}
