package auth

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// OAuth 2 access tokens (JWTs), validated as RabbitMQ's
// rabbitmq_auth_backend_oauth2 does: the signature with a key of the
// configured provider (a JWKS file, a JWKS URL, the jwks_uri of an OpenID
// discovery document, or a symmetric key for HS256), exp (required unless
// RequireExp is off) and nbf against the clock without leeway, aud
// containing the resource server id (unless VerifyAud is off), iss when
// an issuer is configured. JOSE parsing and signature checks are
// go-jose's; this file only decides which keys and algorithms are
// acceptable.

// Defaults of OAuth2Options.
const (
	DefaultOAuth2FetchTimeout       = 2 * time.Second
	DefaultOAuth2MinRefreshInterval = 5 * time.Second
	// MaxTokenSize bounds the tokens looked at; a longer one is refused
	// before parsing.
	MaxTokenSize = 64 << 10
)

// DefaultOAuth2Algorithms are the signature algorithms accepted when
// OAuth2Options.Algorithms is empty; HS256 is added when a symmetric key
// is configured, and only then.
var DefaultOAuth2Algorithms = []string{"RS256", "PS256", "ES256"}

// OAuth2Options configures NewOAuth2. The names follow RabbitMQ's
// auth_oauth2.* settings.
type OAuth2Options struct {
	// ResourceServerID is this broker's identity at the provider: the
	// audience tokens must carry and the default scope prefix. Required.
	ResourceServerID string
	// ScopePrefix is what a scope must start with to be ours; it is
	// dropped before parsing. Empty: ResourceServerID + ".".
	ScopePrefix string
	// VerifyAud requires aud to contain ResourceServerID.
	VerifyAud bool
	// RequireExp refuses tokens without exp.
	RequireExp bool
	// Issuer, when set, must equal the token's iss; it is also where the
	// discovery document is looked up (Issuer +
	// "/.well-known/openid-configuration") when neither JWKSURL nor
	// JWKSFile is set.
	Issuer string
	// DiscoveryURL overrides the discovery document's address.
	DiscoveryURL string
	// JWKSURL is fetched at start, and again when a token names an unknown
	// kid (at most once per MinRefreshInterval).
	JWKSURL string
	// JWKSFile is a JWKS JSON file read at start; it may hold symmetric
	// ("oct") keys, which enable HS256.
	JWKSFile string
	// SigningKeys are PEM public keys (RSA, ECDSA or Ed25519; PKIX
	// "PUBLIC KEY" or an X.509 certificate) by key id, as RabbitMQ's
	// signing_keys.
	SigningKeys map[string][]byte
	// SymmetricKey is an HS256 key (raw bytes) with key id
	// SymmetricKeyID ("" matches tokens without kid).
	SymmetricKey   []byte
	SymmetricKeyID string
	// DefaultKey is the key id used for tokens without kid.
	DefaultKey string
	// Algorithms accepted; empty: DefaultOAuth2Algorithms (+HS256 with a
	// symmetric key).
	Algorithms []string
	// PreferredUsernameClaims name the user: the first present as a
	// string. Empty: sub, client_id.
	PreferredUsernameClaims []string
	// AdditionalScopesKey is a space-separated list of claim paths
	// (dotted) holding more scopes (RabbitMQ's additional_scopes_key, once
	// extra_scopes_source).
	AdditionalScopesKey string
	// ScopePatternSyntax is "wildcard" (default) or "regex": scope parts
	// are RE2 expressions matched against the whole name (RabbitMQ's
	// scope_pattern_syntax; PCRE there).
	ScopePatternSyntax string
	// ScopeAliases maps a scope value (e.g. a role name) to the scopes it
	// stands for.
	ScopeAliases map[string][]string
	// FetchTimeout bounds one JWKS or discovery fetch; a login waiting for
	// a key waits no longer. 0: DefaultOAuth2FetchTimeout.
	FetchTimeout time.Duration
	// MinRefreshInterval is the least time between two fetches caused by
	// unknown kids. 0: DefaultOAuth2MinRefreshInterval.
	MinRefreshInterval time.Duration
	// HTTPClient fetches JWKS and discovery documents (its TLS settings
	// apply); nil: a client with FetchTimeout.
	HTTPClient *http.Client
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
	// Log receives key refresh errors; nil: discarded.
	Log *slog.Logger
}

// OAuth2 validates access tokens and turns their scopes into grants. It
// is safe for concurrent use; a login whose kid is known takes no lock.
type OAuth2 struct {
	opts   OAuth2Options
	prefix string
	regex  bool // ScopePatternSyntax "regex"
	algs   []jose.SignatureAlgorithm
	log    *slog.Logger
	keys   *keySource
}

// Token refusal reasons (TokenError.Reason), recorded in the audit log.
const (
	TokenMalformed       = "malformed"
	TokenTooLarge        = "too_large"
	TokenBadAlgorithm    = "bad_algorithm"
	TokenBadSignature    = "bad_signature"
	TokenUnknownKey      = "unknown_key"
	TokenKeysUnavailable = "keys_unavailable"
	TokenExpired         = "expired"
	TokenNoExp           = "no_exp"
	TokenNotYetValid     = "not_yet_valid"
	TokenAudience        = "audience"
	TokenIssuer          = "issuer"
	TokenNoScope         = "no_scope"
	TokenTooManyScopes   = "too_many_scopes"
	TokenUserChanged     = "username_changed"
)

// ErrBadToken is wrapped by every *TokenError.
var ErrBadToken = errors.New("auth: token refused")

// TokenError is a refused token: Reason is one of the Token* constants.
// It wraps ErrBadToken and ErrBadCredentials, so front ends that answer
// bad credentials answer it the same way.
type TokenError struct {
	Reason string
	Detail string
}

func (e *TokenError) Error() string {
	return "auth: token refused (" + e.Reason + "): " + e.Detail
}

// Unwrap makes errors.Is hold for ErrBadToken and ErrBadCredentials.
func (e *TokenError) Unwrap() []error { return []error{ErrBadToken, ErrBadCredentials} }

func tokenErr(reason, format string, args ...any) *TokenError {
	return &TokenError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// TokenReason returns the reason of a *TokenError in err's chain, or "".
func TokenReason(err error) string {
	var te *TokenError
	if errors.As(err, &te) {
		return te.Reason
	}
	return ""
}

// NewOAuth2 checks the options, loads the JWKS file and fetches the JWKS
// URL (or the discovery document and its jwks_uri). A failed fetch at
// start is logged, not fatal: the next login with an unknown kid tries
// again.
func NewOAuth2(o OAuth2Options) (*OAuth2, error) {
	if o.ResourceServerID == "" {
		return nil, errors.New("auth: oauth2: resource_server_id is required")
	}
	if o.ScopePrefix == "" {
		o.ScopePrefix = o.ResourceServerID + "."
	}
	if len(o.PreferredUsernameClaims) == 0 {
		o.PreferredUsernameClaims = []string{"sub", "client_id"}
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = DefaultOAuth2FetchTimeout
	}
	if o.MinRefreshInterval <= 0 {
		o.MinRefreshInterval = DefaultOAuth2MinRefreshInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: o.FetchTimeout}
	}
	switch o.ScopePatternSyntax {
	case "", "wildcard", "regex":
	default:
		return nil, fmt.Errorf("auth: oauth2: scope_pattern_syntax %q is not wildcard or regex", o.ScopePatternSyntax)
	}
	a := &OAuth2{opts: o, prefix: o.ScopePrefix, log: o.Log, regex: o.ScopePatternSyntax == "regex"}
	if a.log == nil {
		a.log = discardLogger
	}
	ks, err := newKeySource(a)
	if err != nil {
		return nil, err
	}
	a.keys = ks
	names := o.Algorithms
	if len(names) == 0 {
		names = DefaultOAuth2Algorithms
		if ks.hasSymmetric() {
			names = append(names, "HS256")
		}
	}
	for _, n := range names {
		alg := jose.SignatureAlgorithm(strings.ToUpper(strings.TrimSpace(n)))
		switch alg {
		case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
			jose.ES256, jose.ES384, jose.ES512, jose.EdDSA:
		case jose.HS256, jose.HS384, jose.HS512:
			if !ks.hasSymmetric() {
				return nil, fmt.Errorf("auth: oauth2: algorithm %s needs a symmetric key", alg)
			}
		default:
			return nil, fmt.Errorf("auth: oauth2: unsupported algorithm %q", n)
		}
		a.algs = append(a.algs, alg)
	}
	ks.start()
	return a, nil
}

// ResourceServerID returns the configured resource server id.
func (o *OAuth2) ResourceServerID() string { return o.opts.ResourceServerID }

// Endpoints returns the provider's authorization and token endpoints from
// its discovery document ("" when unknown), for the management UI's
// login.
func (o *OAuth2) Endpoints() (authorization, token string) {
	d := o.keys.discovery.Load()
	if d == nil {
		if o.keys.discoveryURL() != "" {
			o.keys.kick() // the start's fetch failed: try again, rate-limited
		}
		return "", ""
	}
	return d.AuthorizationEndpoint, d.TokenEndpoint
}

// tokenClaims are the registered claims checked here; the rest are read
// into a map.
type tokenClaims struct {
	jwt.Claims
}

// validate checks token and returns its grant.
func (o *OAuth2) validate(token string) (*grant, error) {
	if len(token) > MaxTokenSize {
		return nil, tokenErr(TokenTooLarge, "token is %d bytes, more than %d", len(token), MaxTokenSize)
	}
	if strings.Count(token, ".") != 2 {
		return nil, tokenErr(TokenMalformed, "not a JWS compact serialization")
	}
	tok, err := jwt.ParseSigned(token, o.algs)
	if err != nil {
		var ua *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &ua) {
			return nil, tokenErr(TokenBadAlgorithm, "%v", err)
		}
		return nil, tokenErr(TokenMalformed, "%v", err)
	}
	if len(tok.Headers) != 1 {
		return nil, tokenErr(TokenMalformed, "want exactly one signature")
	}
	h := tok.Headers[0]
	kid := h.KeyID
	if kid == "" {
		kid = o.opts.DefaultKey
	}
	key, err := o.keys.key(kid, jose.SignatureAlgorithm(h.Algorithm))
	if err != nil {
		return nil, err
	}
	var std tokenClaims
	var claims map[string]any
	if err := tok.Claims(key, &std, &claims); err != nil {
		if errors.Is(err, jose.ErrCryptoFailure) || errors.Is(err, jose.ErrUnsupportedKeyType) {
			return nil, tokenErr(TokenBadSignature, "signature does not verify with key %q", kid)
		}
		return nil, tokenErr(TokenMalformed, "%v", err)
	}
	now := o.opts.Now()
	switch {
	case std.Expiry == nil && o.opts.RequireExp:
		return nil, tokenErr(TokenNoExp, "token has no exp claim")
	case std.Expiry != nil && !now.Before(std.Expiry.Time()):
		return nil, tokenErr(TokenExpired, "token expired at %s", std.Expiry.Time().UTC().Format(time.RFC3339))
	case std.NotBefore != nil && now.Before(std.NotBefore.Time()):
		return nil, tokenErr(TokenNotYetValid, "token not valid before %s", std.NotBefore.Time().UTC().Format(time.RFC3339))
	case o.opts.VerifyAud && !std.Audience.Contains(o.opts.ResourceServerID):
		return nil, tokenErr(TokenAudience, "aud %v does not contain %q", []string(std.Audience), o.opts.ResourceServerID)
	case o.opts.Issuer != "" && std.Issuer != o.opts.Issuer:
		return nil, tokenErr(TokenIssuer, "iss %q is not %q", std.Issuer, o.opts.Issuer)
	}
	scopes, err := o.tokenScopes(claims)
	if err != nil {
		return nil, err
	}
	g := &grant{name: o.usernameFrom(claims), scopes: scopes, tags: tagsFromScopes(scopes), sub: std.Subject}
	if std.Expiry != nil {
		g.exp = std.Expiry.Time()
	}
	for _, s := range scopes {
		if sp, ok := parseScope(s, claims, o.regex); ok {
			g.perms = append(g.perms, sp)
		}
	}
	if len(g.perms) == 0 && len(g.tags) == 0 {
		return nil, tokenErr(TokenNoScope, "token has no scope for resource server %q", o.opts.ResourceServerID)
	}
	return g, nil
}
