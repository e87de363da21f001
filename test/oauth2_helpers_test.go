package test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/trident-broker/trident/conf"
)

// idp is a minimal OpenID Connect provider on loopback: a discovery
// document, a JWKS of its current keys, an authorization endpoint that
// approves at once (redirecting back with a code) and a token endpoint
// that checks the PKCE verifier. Tests rotate its keys, make its JWKS hang
// and sign tokens with its keys themselves.
type idp struct {
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	keys      []idpKey // published; keys[0] signs
	jwksDelay time.Duration
	codes     map[string]idpCode
	// loginScopes are the scopes of tokens the token endpoint issues.
	loginScopes []string
	pkceOK      atomic.Int32 // token requests whose verifier matched
	jwksHits    atomic.Int32
}

type idpKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv any
}

type idpCode struct {
	challenge, redirect, client string
}

func newIDP(t testing.TB) *idp {
	p := &idp{t: t, codes: map[string]idpCode{}}
	p.keys = []idpKey{p.newKey("key-1", jose.RS256)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		writeJSONResp(w, map[string]any{"issuer": p.issuer(), "jwks_uri": p.issuer() + "/jwks",
			"authorization_endpoint": p.issuer() + "/authorize", "token_endpoint": p.issuer() + "/token",
			"code_challenge_methods_supported": []string{"S256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		p.jwksHits.Add(1)
		p.mu.Lock()
		delay := p.jwksDelay
		var set jose.JSONWebKeySet
		for _, k := range p.keys {
			set.Keys = append(set.Keys, k.public())
		}
		p.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		writeJSONResp(w, set)
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
			http.Error(w, "want response_type=code and an S256 code_challenge", http.StatusBadRequest)
			return
		}
		code := fmt.Sprintf("code-%d", time.Now().UnixNano())
		p.mu.Lock()
		p.codes[code] = idpCode{challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri"), client: q.Get("client_id")}
		p.mu.Unlock()
		back, err := url.Parse(q.Get("redirect_uri"))
		if err != nil {
			http.Error(w, "bad redirect_uri", http.StatusBadRequest)
			return
		}
		bq := back.Query()
		bq.Set("code", code)
		bq.Set("state", q.Get("state"))
		back.RawQuery = bq.Encode()
		http.Redirect(w, r, back.String(), http.StatusFound)
	})
	mux.HandleFunc("OPTIONS /token", func(w http.ResponseWriter, r *http.Request) {
		cors(w)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		cors(w)
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		c, ok := p.codes[r.PostForm.Get("code")]
		delete(p.codes, r.PostForm.Get("code"))
		scopes := p.loginScopes
		p.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		switch {
		case !ok || r.PostForm.Get("grant_type") != "authorization_code":
			w.WriteHeader(http.StatusBadRequest)
			writeJSONResp(w, map[string]string{"error": "invalid_grant"})
			return
		case base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge || r.PostForm.Get("redirect_uri") != c.redirect || r.PostForm.Get("client_id") != c.client:
			w.WriteHeader(http.StatusBadRequest)
			writeJSONResp(w, map[string]string{"error": "invalid_grant", "error_description": "PKCE verifier, redirect_uri or client_id mismatch"})
			return
		}
		p.pkceOK.Add(1)
		tok := p.token("ui-user", time.Hour, scopes...)
		writeJSONResp(w, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func cors(w http.ResponseWriter) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	w.Header().Set("Access-Control-Allow-Headers", "Content-Type, Accept")
	w.Header().Set("Access-Control-Allow-Methods", "POST, OPTIONS")
}

func writeJSONResp(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (p *idp) issuer() string { return p.srv.URL }

var (
	testRSAOnce sync.Once
	testRSAKeys [3]*rsa.PrivateKey
)

func (p *idp) newKey(kid string, alg jose.SignatureAlgorithm) idpKey {
	switch alg {
	case jose.ES256:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			p.t.Fatal(err)
		}
		return idpKey{kid, alg, k}
	default:
		testRSAOnce.Do(func() {
			for i := range testRSAKeys {
				k, err := rsa.GenerateKey(rand.Reader, 2048)
				if err != nil {
					panic(err)
				}
				testRSAKeys[i] = k
			}
		})
		i := int(kid[len(kid)-1]) % len(testRSAKeys)
		return idpKey{kid, alg, testRSAKeys[i]}
	}
}

func (k idpKey) public() jose.JSONWebKey {
	switch pk := k.priv.(type) {
	case *rsa.PrivateKey:
		return jose.JSONWebKey{Key: &pk.PublicKey, KeyID: k.kid, Use: "sig", Algorithm: string(k.alg)}
	case *ecdsa.PrivateKey:
		return jose.JSONWebKey{Key: &pk.PublicKey, KeyID: k.kid, Use: "sig", Algorithm: string(k.alg)}
	}
	panic("unknown key type")
}

// rotate publishes a new signing key kid (ES256), keeping the old ones.
func (p *idp) rotate(kid string) {
	k := p.newKey(kid, jose.ES256)
	p.mu.Lock()
	p.keys = append([]idpKey{k}, p.keys...)
	p.mu.Unlock()
}

func (p *idp) setJWKSDelay(d time.Duration) {
	p.mu.Lock()
	p.jwksDelay = d
	p.mu.Unlock()
}

func (p *idp) signingKey() idpKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[0]
}

// token signs a token for sub valid for ttl (negative: already expired)
// carrying scopes.
func (p *idp) token(sub string, ttl time.Duration, scopes ...string) string {
	return p.signClaims(p.signingKey(), p.claims(sub, ttl, scopes...))
}

func (p *idp) claims(sub string, ttl time.Duration, scopes ...string) map[string]any {
	now := time.Now()
	return map[string]any{"iss": p.issuer(), "sub": sub, "aud": []string{"rabbitmq"}, "iat": now.Unix(),
		"exp": now.Add(ttl).Unix(), "scope": strings.Join(scopes, " "), "client_id": "trident-test"}
}

func (p *idp) signClaims(k idpKey, c map[string]any) string {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.kid))
	if err != nil {
		p.t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		p.t.Fatal(err)
	}
	return tok
}

// forged signs claims with a key the provider never published, under the
// current key's kid: a wrong signature.
func (p *idp) forged(sub string, ttl time.Duration, scopes ...string) string {
	cur := p.signingKey()
	k := p.newKey("forger-2", jose.RS256)
	k.kid = cur.kid
	if cur.alg == jose.ES256 {
		k = idpKey{cur.kid, jose.ES256, p.newKey("x", jose.ES256).priv}
	}
	return p.signClaims(k, p.claims(sub, ttl, scopes...))
}

// oauthBroker starts a broker with every front end and the HTTP API,
// taking tokens from p (issuer and discovery) beside the internal users.
func oauthBroker(t testing.TB, p *idp, mutate ...func(*conf.Config)) (*broker, string) {
	t.Helper()
	return mgmtBroker(t, append([]func(*conf.Config){func(c *conf.Config) {
		c.MQTT.Listen = "127.0.0.1:0"
		c.STOMP.Listen = "127.0.0.1:0"
		c.OAuth2.ResourceServerID = "rabbitmq"
		c.OAuth2.Issuer = p.issuer()
		c.OAuth2.FetchTimeout = 500 * time.Millisecond
		c.OAuth2.MinRefreshInterval = 10 * time.Millisecond
		c.HTTP.OAuthEnabled = true
		c.HTTP.OAuthClientID = "trident-ui"
	}}, mutate...)...)
}

// bearer is an apiClient that sends a bearer token.
type bearer struct {
	t     testing.TB
	base  string
	token string
}

func (b bearer) do(method, path string) (int, []byte) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// noneAlgToken is an unsigned token (alg none).
func noneAlgToken(c map[string]any) string {
	p, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + base64.RawURLEncoding.EncodeToString(p) + "."
}
