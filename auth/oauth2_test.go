package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// testKey is a signing key the tests sign tokens with.
type testKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv any
}

var (
	rsaOnce sync.Once
	rsaKeys [2]*rsa.PrivateKey
)

// rsaKey returns one of two RSA keys generated once per test binary.
func rsaKey(t testing.TB, i int) *rsa.PrivateKey {
	rsaOnce.Do(func() {
		for j := range rsaKeys {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			rsaKeys[j] = k
		}
	})
	return rsaKeys[i]
}

func newECKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (k testKey) public() jose.JSONWebKey {
	switch p := k.priv.(type) {
	case *rsa.PrivateKey:
		return jose.JSONWebKey{Key: &p.PublicKey, KeyID: k.kid, Use: "sig"}
	case *ecdsa.PrivateKey:
		return jose.JSONWebKey{Key: &p.PublicKey, KeyID: k.kid, Use: "sig"}
	}
	return jose.JSONWebKey{Key: k.priv, KeyID: k.kid}
}

func (k testKey) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func jwksJSON(t testing.TB, keys ...testKey) []byte {
	var set jose.JSONWebKeySet
	for _, k := range keys {
		set.Keys = append(set.Keys, k.public())
	}
	data, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeJWKS(t testing.TB, keys ...testKey) string {
	p := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(p, jwksJSON(t, keys...), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// claims returns valid claims for resource server "rabbitmq" expiring in
// an hour, with the given scopes.
func claims(scope ...string) map[string]any {
	now := time.Now()
	return map[string]any{"sub": "svc-a", "aud": []string{"rabbitmq"}, "iss": "https://idp.test",
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "scope": strings.Join(scope, " ")}
}

func with(c map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

func newTestOAuth2(t testing.TB, mod func(*OAuth2Options)) *OAuth2 {
	t.Helper()
	o := OAuth2Options{ResourceServerID: "rabbitmq", VerifyAud: true, RequireExp: true, Issuer: "https://idp.test"}
	if mod != nil {
		mod(&o)
	}
	a, err := NewOAuth2(o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func wantReason(t testing.TB, err error, reason string) {
	t.Helper()
	if got := TokenReason(err); got != reason {
		t.Fatalf("err = %v (reason %q), want reason %q", err, got, reason)
	}
	if !errors.Is(err, ErrBadCredentials) || !errors.Is(err, ErrBadToken) {
		t.Fatalf("err %v does not wrap ErrBadCredentials and ErrBadToken", err)
	}
}

func TestWildcardMatch(t *testing.T) {
	// Cases from RabbitMQ's wildcard_match_SUITE, and its scan's quirks.
	for _, c := range []struct {
		subject, pattern string
		want             bool
	}{
		{"foo", "foo", true}, {"foo", "bar", false}, {"", "", true}, {"foo", "", false},
		{"foo", "*", true}, {"", "*", true}, {"foo", "f*", true}, {"foo", "*oo", true}, {"foo", "*foo", true},
		{"foo", "*r", false}, {"foo", "fo", false}, {"foo", "fooo", false}, {"CaseSensitive", "casesensitive", false},
		{"some long string", "s*e*str*", true}, {"some long string", "*+*+*", true}, {"some string", "*+*+*", false},
		{"string", "*some*string*", false}, {"fo", "f*o*", true}, {"foo", "*x*", false},
		{"foo.bar.baz", "foo.*.baz", true}, {"foo.bar.baz", "*.bar.*", true}, {"foo.bar.baz", "foo.*", true},
		{"a b", "a+b", true}, {"a/b", "a%2Fb", true}, {"a%b", "a%zz", false},
		{"bab", "*b", false}, // first-occurrence scan, as RabbitMQ
		{"foo", "*o", false}, {"foo", "f*o", false},
		{"a", "a**", false}, // RabbitMQ: subject done, pattern not
		{"abc", "a**c", true},
	} {
		if got := wildcardMatch(c.subject, c.pattern); got != c.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", c.subject, c.pattern, got, c.want)
		}
	}
}

func TestScopeParse(t *testing.T) {
	cl := map[string]any{"sub": "dev1", "n": 3}
	type want struct {
		perm                  Perm
		vhost, resource, rkey string
		hasRKey               bool
	}
	for _, c := range []struct {
		scope string
		ok    bool
		want  want
	}{
		{"read:*/*", true, want{Read, "*", "*", "", false}},
		{"write:vh/ex/rk.*", true, want{Write, "vh", "ex", "rk.*", true}},
		{"configure:%2F/q-{sub}", true, want{Configure, "%2F", "q-dev1", "", false}},
		{"read:{vhost}/x", true, want{Read, "{vhost}", "x", "", false}},
		{"read:*/q-{missing}", true, want{Read, "*", "q-missing", "", false}},
		{"read:*/q-{n}", true, want{Read, "*", "q-n", "", false}},
		{"read:*/{unclosed", false, want{}},
		{"read:*", false, want{}},
		{"read:a/b/c/d", false, want{}},
		{"tag:administrator", false, want{}},
		{"delete:*/*", false, want{}},
	} {
		sp, ok := parseScope(c.scope, cl, false)
		got := want{sp.perm, sp.vhost.raw, sp.resource.raw, sp.rkey.raw, sp.hasRKey}
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("parseScope(%q) = %+v %v, want %+v %v", c.scope, got, ok, c.want, c.ok)
		}
	}
	// {vhost} stands for the vhost checked; %2F decodes to "/".
	sp, _ := parseScope("read:{vhost}/q-{vhost}", cl, false)
	g := &grant{perms: []scopePerm{sp}}
	if !g.resourceAccess("a", Read, "q-a") || g.resourceAccess("a", Read, "q-b") {
		t.Error("{vhost} not substituted by the checked vhost")
	}
	sp, _ = parseScope("write:%2F/x", cl, false)
	if g := (&grant{perms: []scopePerm{sp}}); !g.vhostAccess("/") || g.vhostAccess("%2F") {
		t.Error("%2F does not stand for the vhost /")
	}
}

func TestTokenValidation(t *testing.T) {
	rs := testKey{"rs", jose.RS256, rsaKey(t, 0)}
	ps := testKey{"ps", jose.PS256, rsaKey(t, 0)}
	es := testKey{"es", jose.ES256, newECKey(t)}
	other := testKey{"rs", jose.RS256, rsaKey(t, 1)} // same kid, other key
	a := newTestOAuth2(t, func(o *OAuth2Options) { o.JWKSFile = writeJWKS(t, rs, ps, es) })

	for _, k := range []testKey{rs, ps, es} {
		g, err := a.validate(k.sign(t, claims("rabbitmq.read:*/*", "rabbitmq.tag:management", "other.write:*/*")))
		if err != nil {
			t.Fatalf("%s: %v", k.alg, err)
		}
		if g.name != "svc-a" || !slices.Equal(g.scopes, []string{"read:*/*", "tag:management"}) || !slices.Equal(g.tags, []string{"management"}) {
			t.Fatalf("%s: grant %+v", k.alg, g)
		}
	}
	hs := testKey{"rs", jose.HS256, []byte("0123456789abcdef0123456789abcdef")}
	now := time.Now()
	for _, c := range []struct {
		name, token, reason string
	}{
		{"expired", rs.sign(t, with(claims("rabbitmq.read:*/*"), "exp", now.Add(-time.Second).Unix())), TokenExpired},
		{"no exp", rs.sign(t, with(claims("rabbitmq.read:*/*"), "exp", nil)), TokenNoExp},
		{"nbf", rs.sign(t, with(claims("rabbitmq.read:*/*"), "nbf", now.Add(time.Hour).Unix())), TokenNotYetValid},
		{"audience", rs.sign(t, with(claims("rabbitmq.read:*/*"), "aud", "elsewhere")), TokenAudience},
		{"issuer", rs.sign(t, with(claims("rabbitmq.read:*/*"), "iss", "https://evil.test")), TokenIssuer},
		{"no scope", rs.sign(t, claims("other.read:*/*", "openid")), TokenNoScope},
		{"bad signature", other.sign(t, claims("rabbitmq.read:*/*")), TokenBadSignature},
		{"unknown key", testKey{"nope", jose.RS256, rsaKey(t, 1)}.sign(t, claims("rabbitmq.read:*/*")), TokenUnknownKey},
		{"hs256 without symmetric key", hs.sign(t, claims("rabbitmq.read:*/*")), TokenBadAlgorithm},
		{"alg none", noneToken(claims("rabbitmq.read:*/*")), TokenBadAlgorithm},
		{"not a jwt", "hello", TokenMalformed},
		{"garbage parts", "a.b.c", TokenMalformed},
		{"bad json header", b64u("{") + "." + b64u("{}") + ".x", TokenMalformed},
		{"too large", strings.Repeat("a", 1<<20), TokenTooLarge},
		{"too many scopes", rs.sign(t, claims(manyScopes(maxScopes+1)...)), TokenTooManyScopes},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.validate(c.token)
			wantReason(t, err, c.reason)
		})
	}
}

func manyScopes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "rabbitmq.tag:" + strconv.Itoa(i)
	}
	return out
}

func b64u(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// noneToken is an unsigned token (alg none), which no configuration
// accepts.
func noneToken(c map[string]any) string {
	p, _ := json.Marshal(c)
	return b64u(`{"alg":"none","typ":"JWT"}`) + "." + base64.RawURLEncoding.EncodeToString(p) + "."
}

func TestScopeRegexSyntax(t *testing.T) {
	cl := map[string]any{"sub": "a.b"}
	for _, c := range []struct {
		scope, vhost, name string
		want               bool
	}{
		{"read:prod-.*/q-[0-9]+", "prod-eu", "q-12", true},
		{"read:prod-.*/q-[0-9]+", "prod-eu", "q-12x", false}, // whole-name match
		{"read:.*/x-{sub}", "v", "x-a.b", true},
		{"read:.*/x-{sub}", "v", "x-aXb", false}, // claim values are quoted
		{"read:{vhost}/.*", "a.b", "q", true},
		{"read:(?i)PROD/.*", "prod", "q", false}, // inline modifiers refused, as RabbitMQ
		{"read:(/.*", "(", "q", false},           // does not compile: matches nothing
	} {
		sp, ok := parseScope(c.scope, cl, true)
		g := &grant{perms: []scopePerm{sp}}
		if got := ok && g.resourceAccess(c.vhost, Read, c.name); got != c.want {
			t.Errorf("%s on %s/%s: %v, want %v", c.scope, c.vhost, c.name, got, c.want)
		}
	}
	if _, err := NewOAuth2(OAuth2Options{ResourceServerID: "r", JWKSURL: "http://127.0.0.1:1/", ScopePatternSyntax: "glob", FetchTimeout: time.Millisecond}); err == nil {
		t.Fatal("scope_pattern_syntax glob accepted")
	}
}

func TestTokenHS256WithSymmetricKey(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a := newTestOAuth2(t, func(o *OAuth2Options) { o.SymmetricKey, o.SymmetricKeyID = key, "hmac" })
	hs := testKey{"hmac", jose.HS256, key}
	if _, err := a.validate(hs.sign(t, claims("rabbitmq.read:*/*"))); err != nil {
		t.Fatal(err)
	}
	wrong := testKey{"hmac", jose.HS256, []byte("another key, 32 bytes long......")}
	_, err := a.validate(wrong.sign(t, claims("rabbitmq.read:*/*")))
	wantReason(t, err, TokenBadSignature)
	// An RSA-signed token naming the symmetric key's kid is refused
	// (no algorithm confusion).
	_, err = a.validate(testKey{"hmac", jose.RS256, rsaKey(t, 0)}.sign(t, claims("rabbitmq.read:*/*")))
	if TokenReason(err) == "" {
		t.Fatalf("RS256 token with the HMAC key's kid: %v", err)
	}
}

func TestTokenPEMSigningKeys(t *testing.T) {
	rs := testKey{"pem-rsa", jose.RS256, rsaKey(t, 0)}
	es := testKey{"pem-ec", jose.ES256, newECKey(t)}
	der, err := x509.MarshalPKIXPublicKey(&rsaKey(t, 0).PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	ecDer, err := x509.MarshalPKIXPublicKey(&es.priv.(*ecdsa.PrivateKey).PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	a := newTestOAuth2(t, func(o *OAuth2Options) {
		o.SigningKeys = map[string][]byte{
			"pem-rsa": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}),
			"pem-ec":  pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDer}),
		}
	})
	for _, k := range []testKey{rs, es} {
		if _, err := a.validate(k.sign(t, claims("rabbitmq.read:*/*"))); err != nil {
			t.Fatalf("%s: %v", k.kid, err)
		}
	}
	if _, err := NewOAuth2(OAuth2Options{ResourceServerID: "r", SigningKeys: map[string][]byte{"x": []byte("not pem")}}); err == nil {
		t.Fatal("a signing key that is not PEM was accepted")
	}
}

func TestTokenScopesSources(t *testing.T) {
	rs := testKey{"rs", jose.RS256, rsaKey(t, 0)}
	a := newTestOAuth2(t, func(o *OAuth2Options) {
		o.JWKSFile = writeJWKS(t, rs)
		o.AdditionalScopesKey = "roles resource_access.account"
		o.ScopeAliases = map[string][]string{"admin": {"rabbitmq.tag:administrator", "rabbitmq.configure:*/*"}}
		o.PreferredUsernameClaims = []string{"preferred_username", "sub"}
	})
	c := claims("admin")
	c["scope"] = []any{"admin", "rabbitmq.read:vh/q1"}
	c["roles"] = "rabbitmq.write:vh/x"
	c["resource_access"] = map[string]any{"account": map[string]any{"rabbitmq": []any{"read:vh/q2"}}}
	c["authorization"] = map[string]any{"permissions": []any{map[string]any{"scopes": []any{"rabbitmq.read:vh/q3"}}}}
	c["preferred_username"] = "alice"
	g, err := a.validate(rs.sign(t, c))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"configure:*/*", "read:vh/q1", "read:vh/q2", "read:vh/q3", "tag:administrator", "write:vh/x"}
	if !slices.Equal(g.scopes, want) || g.name != "alice" {
		t.Fatalf("scopes %v name %q, want %v alice", g.scopes, g.name, want)
	}
}

// jwksServer serves a JWKS that the test can change, counting requests;
// delay, when set, holds each answer.
type jwksServer struct {
	*httptest.Server
	mu    sync.Mutex
	body  []byte
	delay time.Duration
	hits  atomic.Int32
}

func newJWKSServer(t testing.TB, keys ...testKey) *jwksServer {
	s := &jwksServer{body: jwksJSON(t, keys...)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		body, delay := s.body, s.delay
		s.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(t testing.TB, delay time.Duration, keys ...testKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = delay
	if keys != nil {
		s.body = jwksJSON(t, keys...)
	}
}

func TestJWKSURLRotationAndTimeout(t *testing.T) {
	k1 := testKey{"k1", jose.RS256, rsaKey(t, 0)}
	k2 := testKey{"k2", jose.RS256, rsaKey(t, 1)}
	srv := newJWKSServer(t, k1)
	a := newTestOAuth2(t, func(o *OAuth2Options) {
		o.JWKSURL = srv.URL
		o.FetchTimeout = time.Second
		o.MinRefreshInterval = time.Millisecond
	})
	if srv.hits.Load() != 1 {
		t.Fatalf("JWKS fetched %d times at start, want 1", srv.hits.Load())
	}
	if _, err := a.validate(k1.sign(t, claims("rabbitmq.read:*/*"))); err != nil {
		t.Fatal(err)
	}
	if srv.hits.Load() != 1 {
		t.Fatalf("a known kid fetched the JWKS again")
	}
	// Rotation: k2 appears at the URL; a token signed by it makes the
	// broker fetch again and is accepted.
	srv.set(t, 0, k1, k2)
	time.Sleep(5 * time.Millisecond)
	if _, err := a.validate(k2.sign(t, claims("rabbitmq.read:*/*"))); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	// A JWKS that hangs: a token with an unknown kid is refused after
	// about FetchTimeout, and meanwhile known-kid logins are not held up.
	srv.set(t, 10*time.Second)
	time.Sleep(5 * time.Millisecond)
	k3 := testKey{"k3", jose.ES256, newECKey(t)}
	done := make(chan error, 1)
	start := time.Now()
	go func() { _, err := a.validate(k3.sign(t, claims("rabbitmq.read:*/*"))); done <- err }()
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	if _, err := a.validate(k1.sign(t, claims("rabbitmq.read:*/*"))); err != nil {
		t.Fatalf("known kid during a hanging fetch: %v", err)
	}
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Fatalf("known-kid login took %s during a hanging JWKS fetch", d)
	}
	select {
	case err := <-done:
		wantReason(t, err, TokenKeysUnavailable)
		if d := time.Since(start); d < 800*time.Millisecond || d > 3*time.Second {
			t.Fatalf("unknown-kid login took %s with a 1s fetch timeout", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("unknown-kid login hangs on a hanging JWKS")
	}
}

func TestJWKSRefreshRateLimited(t *testing.T) {
	k1 := testKey{"k1", jose.RS256, rsaKey(t, 0)}
	srv := newJWKSServer(t, k1)
	a := newTestOAuth2(t, func(o *OAuth2Options) { o.JWKSURL = srv.URL; o.MinRefreshInterval = time.Hour })
	for i := 0; i < 20; i++ {
		_, err := a.validate(testKey{"kid-" + strconv.Itoa(i), jose.RS256, rsaKey(t, 1)}.sign(t, claims("rabbitmq.read:*/*")))
		if TokenReason(err) != TokenUnknownKey && TokenReason(err) != TokenKeysUnavailable {
			t.Fatalf("unknown kid %d: %v", i, err)
		}
	}
	if n := srv.hits.Load(); n > 2 {
		t.Fatalf("20 unknown kids fetched the JWKS %d times, want at most 2", n)
	}
}

func TestOIDCDiscovery(t *testing.T) {
	k1 := testKey{"k1", jose.ES256, newECKey(t)}
	jw := newJWKSServer(t, k1)
	var iss string
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"issuer": iss, "jwks_uri": jw.URL,
			"authorization_endpoint": iss + "/authorize", "token_endpoint": iss + "/token"})
	}))
	defer idp.Close()
	iss = idp.URL
	a := newTestOAuth2(t, func(o *OAuth2Options) { o.Issuer = iss })
	if _, err := a.validate(k1.sign(t, with(claims("rabbitmq.read:*/*"), "iss", iss))); err != nil {
		t.Fatal(err)
	}
	if az, tok := a.Endpoints(); az != iss+"/authorize" || tok != iss+"/token" {
		t.Fatalf("endpoints %q %q", az, tok)
	}
}

func TestTokenUsers(t *testing.T) {
	rs := testKey{"rs", jose.RS256, rsaKey(t, 0)}
	var audit bytes.Buffer
	var amu sync.Mutex
	a := newTestOAuth2(t, func(o *OAuth2Options) { o.JWKSFile = writeJWKS(t, rs) })
	us, err := New(newMemStore(), Options{DefaultUser: "guest", DefaultPass: "guest", OAuth2: a,
		Audit: slog.New(slog.NewJSONHandler(lockedWriter{&amu, &audit}, nil)), FailedLoginLimit: 3, FailedLoginBackoff: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	// Internal users keep working beside tokens.
	if _, err := us.Authenticate("guest", "guest", remote); err != nil {
		t.Fatal(err)
	}
	// A token named "guest" gets only its scopes, not guest's permissions.
	tok := rs.sign(t, with(claims("rabbitmq.read:vh/q-*", "rabbitmq.write:vh/amq.topic/a.*", "rabbitmq.tag:monitoring"), "sub", "guest"))
	u, err := us.Authenticate("anything", tok, remote)
	if err != nil {
		t.Fatal(err)
	}
	if !u.IsToken() || u.Name() != "guest" || !u.HasTag("monitoring") || u.HasTag("administrator") {
		t.Fatalf("token user %q tags %v", u.Name(), u.Tags())
	}
	checks := []struct {
		err  error
		want bool
	}{
		{us.CheckVHost(u, "vh"), true},
		{us.CheckVHost(u, "/"), false},
		{us.Check(u, "vh", Read, "queue", "q-1"), true},
		{us.Check(u, "vh", Write, "queue", "q-1"), false},
		{us.Check(u, "/", Read, "queue", "q-1"), false},
		{us.CheckTopic(u, "vh", Write, "amq.topic", "a.b", ""), true},
		{us.CheckTopic(u, "vh", Write, "amq.topic", "b.b", ""), false},
		{us.CheckTopic(u, "vh", Read, "amq.topic", "a.b", ""), false}, // read:vh/q-* has no routing key part
	}
	for i, c := range checks {
		if (c.err == nil) != c.want {
			t.Errorf("check %d: err %v, want allowed=%v", i, c.err, c.want)
		}
	}
	// Refresh: a token for another user is refused; one for the same
	// user replaces the scopes at once.
	if err := us.UpdateSecret(u, rs.sign(t, with(claims("rabbitmq.read:*/*"), "sub", "mallory")), remote); TokenReason(err) != TokenUserChanged {
		t.Fatalf("refresh with another user's token: %v", err)
	}
	v := u.CredentialVersion()
	if err := us.UpdateSecret(u, rs.sign(t, with(claims("rabbitmq.configure:*/*"), "sub", "guest")), remote); err != nil {
		t.Fatal(err)
	}
	if u.CredentialVersion() == v || us.Check(u, "vh", Read, "queue", "q-1") == nil || us.Check(u, "/x", Configure, "queue", "q") != nil {
		t.Fatalf("refresh did not replace the scopes: %v", u.Scopes())
	}
	// An expiring token: checks fail once it has expired.
	short := rs.sign(t, with(claims("rabbitmq.read:*/*"), "sub", "short", "exp", time.Now().Add(1100*time.Millisecond).Unix()))
	su, err := us.Authenticate("", short, remote)
	if err != nil {
		t.Fatal(err)
	}
	fired := make(chan struct{})
	w := WatchExpiry(su, func() { close(fired) })
	defer w.Stop()
	select {
	case <-fired:
	case <-time.After(3 * time.Second):
		t.Fatal("expiry watch did not fire")
	}
	if us.Check(su, "/", Read, "queue", "q") == nil {
		t.Fatal("an expired token still passes checks")
	}
	// Failed tokens count against the rate limit like passwords.
	bad := testKey{"rs", jose.RS256, rsaKey(t, 1)}.sign(t, claims("rabbitmq.read:*/*"))
	other := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 1}
	for i := 0; i < 3; i++ {
		if _, err := us.Authenticate("x", bad, other); TokenReason(err) != TokenBadSignature {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	if _, err := us.AuthenticateToken(tok, other); !errors.Is(err, ErrTooManyAttempts) {
		t.Fatalf("after 3 bad tokens: %v", err)
	}
	amu.Lock()
	log := audit.String()
	amu.Unlock()
	for _, want := range []string{`"msg":"authentication.success","user":"guest","remote":"127.0.0.1:1","backend":"oauth2"`,
		`"reason":"auth: token refused (bad_signature)`, `"msg":"authorization.denied","user":"guest","vhost":"/","backend":"oauth2"`,
		`"msg":"authentication.blocked"`, `"reason":"auth: token refused (username_changed)`} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %s", want)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestBackendOrder(t *testing.T) {
	rs := testKey{"rs", jose.RS256, rsaKey(t, 0)}
	a := newTestOAuth2(t, func(o *OAuth2Options) { o.JWKSFile = writeJWKS(t, rs) })
	tok := rs.sign(t, claims("rabbitmq.read:*/*"))
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	internalOnly, err := New(newMemStore(), Options{DefaultUser: "guest", DefaultPass: "guest", OAuth2: a, Backends: []string{"internal"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := internalOnly.Authenticate("x", tok, remote); !errors.Is(err, ErrBadCredentials) || TokenReason(err) != "" {
		t.Fatalf("internal-only backend accepted or judged a token: %v", err)
	}
	oauthOnly, err := New(newMemStore(), Options{DefaultUser: "guest", DefaultPass: "guest", OAuth2: a, Backends: []string{"rabbit_auth_backend_oauth2"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oauthOnly.Authenticate("guest", "guest", remote); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("oauth2-only backend accepted a password: %v", err)
	}
	if _, err := oauthOnly.Authenticate("x", tok, remote); err != nil {
		t.Fatal(err)
	}
	if _, err := New(newMemStore(), Options{Backends: []string{"oauth2"}}); err == nil {
		t.Fatal("backend oauth2 without OAuth2 options accepted")
	}
}

// FuzzTokenAndScopes feeds arbitrary tokens to the validator and arbitrary
// scopes to the scope parser and matcher: they must never panic, and a
// token that validates must carry a scope.
func FuzzTokenAndScopes(f *testing.F) {
	rs := testKey{"rs", jose.RS256, rsaKey(f, 0)}
	a := newTestOAuth2(f, func(o *OAuth2Options) { o.JWKSFile = writeJWKS(f, rs) })
	f.Add(rs.sign(f, claims("rabbitmq.read:*/*")), "read:*/q-{sub}/rk.*", "q-x")
	f.Add(noneToken(claims("rabbitmq.read:*/*")), "write:%2F/a*b*c", "a/b")
	f.Add("a.b.c", "configure:{vhost}/{", "")
	f.Add("", "read:(a|b)+/q-[0-9]{1,3}/{vhost}.*", "aab")
	f.Add(b64u(`{"alg":"RS256","kid":"rs"}`)+"."+b64u(`{"scope":["rabbitmq.read:*/*"]}`)+".AAAA", "tag:x", "**")
	f.Fuzz(func(t *testing.T, token, scope, subject string) {
		if g, err := a.validate(token); err == nil && len(g.perms) == 0 && len(g.tags) == 0 {
			t.Fatalf("token without scopes validated")
		} else if err != nil && TokenReason(err) == "" {
			t.Fatalf("refusal without a reason: %v", err)
		}
		for _, regex := range []bool{false, true} {
			sp, ok := parseScope(scope, map[string]any{"sub": subject}, regex)
			if !ok {
				continue
			}
			g := &grant{perms: []scopePerm{sp}}
			g.vhostAccess(subject)
			g.resourceAccess(subject, sp.perm, subject)
			g.topicAccess(subject, sp.perm, subject, subject)
		}
		wildcardMatch(subject, scope)
	})
}

// TestDiscoveryDownAtStart: a provider that is down when the broker starts
// is logged, not fatal; the next login fetches again and succeeds.
func TestDiscoveryDownAtStart(t *testing.T) {
	k1 := testKey{"k1", jose.RS256, rsaKey(t, 0)}
	jw := newJWKSServer(t, k1)
	var up atomic.Bool
	var iss string
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"issuer": iss, "jwks_uri": jw.URL})
	}))
	defer idp.Close()
	iss = idp.URL
	var logs bytes.Buffer
	var mu sync.Mutex
	a := newTestOAuth2(t, func(o *OAuth2Options) {
		o.Issuer, o.MinRefreshInterval = iss, time.Millisecond
		o.Log = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	})
	mu.Lock()
	logged := strings.Contains(logs.String(), "signing key refresh failed") && strings.Contains(logs.String(), "status 503")
	mu.Unlock()
	if !logged {
		t.Fatalf("the failed fetch at start was not logged: %s", logs.String())
	}
	tok := k1.sign(t, with(claims("rabbitmq.read:*/*"), "iss", iss))
	time.Sleep(2 * time.Millisecond)
	_, err := a.validate(tok)
	wantReason(t, err, TokenKeysUnavailable)
	up.Store(true)
	time.Sleep(2 * time.Millisecond)
	if _, err := a.validate(tok); err != nil {
		t.Fatalf("after the provider came up: %v", err)
	}
}

// TestScopeClaimEscaped: a claim value expanded into a scope matches only
// itself, in both pattern syntaxes, whatever characters it holds (F14).
func TestScopeClaimEscaped(t *testing.T) {
	for _, regex := range []bool{false, true} {
		for _, c := range []struct {
			sub     string
			granted []string // names the scope q-{sub} grants
			denied  []string
			invalid bool // the value cannot be a name: the scope grants nothing
		}{
			{sub: "*", granted: []string{"q-*"}, denied: []string{"q-other", "q-", "q-**"}},
			{sub: ".*", granted: []string{"q-.*"}, denied: []string{"q-other", "q-.x", "q-."}},
			{sub: "a|b", granted: []string{"q-a|b"}, denied: []string{"q-a", "b", "q-b"}},
			{sub: "(", granted: []string{"q-("}, denied: []string{"q-", "q-x"}},
			{sub: "[", granted: []string{"q-["}, denied: []string{"q-", "q-x"}},
			{sub: "[a-z]", granted: []string{"q-[a-z]"}, denied: []string{"q-a"}},
			{sub: "%2A", granted: []string{"q-%2A"}, denied: []string{"q-*", "q-x"}},
			{sub: "%zz", granted: []string{"q-%zz"}, denied: []string{"q-x"}},
			{sub: "a+b", granted: []string{"q-a+b"}, denied: []string{"q-a b"}},
			{sub: "x/y", granted: []string{"q-x/y"}, denied: []string{"q-x"}},
			{sub: "dev1", granted: []string{"q-dev1"}, denied: []string{"q-dev", "q-dev12", "q-other"}},
			{sub: "a\x00b", invalid: true, denied: []string{"q-a\x00b", "q-a"}},
			{sub: "\xff", invalid: true, denied: []string{"q-\xff"}},
		} {
			cl := map[string]any{"sub": c.sub, "client_id": c.sub}
			for _, scope := range []string{"read:vh/q-{sub}", "read:vh/q-{client_id}"} {
				sp, ok := parseScope(scope, cl, regex)
				if ok == c.invalid {
					t.Errorf("regex=%v %s with %q: parsed %v, want %v", regex, scope, c.sub, ok, !c.invalid)
				}
				g := &grant{perms: []scopePerm{sp}}
				for _, n := range c.granted {
					if !ok || !g.resourceAccess("vh", Read, n) {
						t.Errorf("regex=%v %s with %q: %q not granted", regex, scope, c.sub, n)
					}
				}
				for _, n := range c.denied {
					if ok && g.resourceAccess("vh", Read, n) {
						t.Errorf("regex=%v %s with %q: %q granted", regex, scope, c.sub, n)
					}
				}
			}
		}
		// A "/" in a value does not add a routing-key part (a topic grant).
		sp, ok := parseScope("write:vh/amq.topic{sub}", map[string]any{"sub": "/#"}, regex)
		if ok && (sp.hasRKey || (&grant{perms: []scopePerm{sp}}).topicAccess("vh", Write, "amq.topic", "#")) {
			t.Errorf("regex=%v: a / in a claim value made a routing-key part", regex)
		}
		// {vhost} too stands only for the vhost checked.
		sp, _ = parseScope("read:*/q-{vhost}", nil, regex)
		if regex {
			sp, _ = parseScope("read:.*/q-{vhost}", nil, regex)
		}
		g := &grant{perms: []scopePerm{sp}}
		if !g.resourceAccess("a*", Read, "q-a*") || g.resourceAccess("a*", Read, "q-abc") || g.resourceAccess(".*", Read, "q-x") {
			t.Errorf("regex=%v: {vhost} not matched literally", regex)
		}
	}
}

// FuzzScopeClaimLiteral: whatever a claim value holds, the scope
// "read:vh/q-{sub}" grants the queue named "q-" + value (up to a name's
// 255 bytes) and no other name tried, in both pattern syntaxes (F14).
func FuzzScopeClaimLiteral(f *testing.F) {
	for _, s := range []string{"*", ".*", "a|b", "q-(", "[", "%2A", "x/y", "a+b", "dev1", "", "\\", "$^"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, sub, other string) {
		for _, regex := range []bool{false, true} {
			sp, ok := parseScope("read:vh/q-{sub}", map[string]any{"sub": sub}, regex)
			if !ok {
				if _, lit := literalPart(sub, regex); lit {
					t.Fatalf("regex=%v: %q refused", regex, sub)
				}
				continue
			}
			g := &grant{perms: []scopePerm{sp}}
			// A regex scope part is at most maxScopeRegex bytes; a name
			// at most 255.
			if len(sub) <= 255 && !g.resourceAccess("vh", Read, "q-"+sub) {
				t.Fatalf("regex=%v: %q does not grant itself", regex, sub)
			}
			if other != sub && g.resourceAccess("vh", Read, "q-"+other) {
				t.Fatalf("regex=%v: sub %q grants q-%q", regex, sub, other)
			}
		}
	})
}
