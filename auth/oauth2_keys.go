package auth

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// maxKeyDocument bounds a JWKS or discovery document read from the network.
const maxKeyDocument = 1 << 20

// discoveryDoc is the part of an OpenID provider's discovery document
// Trident uses.
type discoveryDoc struct {
	Issuer                string `json:"issuer"`
	JWKSURI               string `json:"jwks_uri"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
}

// keySource holds the signing keys: static ones (JWKS file, symmetric key)
// and those fetched from the JWKS URL, replaced whole by each successful
// fetch. Lookups read an atomic pointer; a lookup of an unknown kid may
// start a fetch (one at a time, at most one per MinRefreshInterval) and
// waits for it at most FetchTimeout. Lock order: mu only; no network wait
// holds it.
type keySource struct {
	a      *OAuth2
	static map[string]jose.JSONWebKey
	remote atomic.Pointer[map[string]jose.JSONWebKey]

	discovery atomic.Pointer[discoveryDoc]
	jwksURL   atomic.Pointer[string] // resolved: configured or from discovery

	mu        sync.Mutex
	inflight  chan struct{} // closed when the running fetch ends; nil: none
	lastStart time.Time
	lastErr   error
}

func newKeySource(a *OAuth2) (*keySource, error) {
	o := a.opts
	ks := &keySource{a: a, static: map[string]jose.JSONWebKey{}}
	if o.JWKSFile != "" {
		data, err := os.ReadFile(o.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("auth: oauth2: jwks file: %w", err)
		}
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(data, &set); err != nil {
			return nil, fmt.Errorf("auth: oauth2: jwks file %s: %w", o.JWKSFile, err)
		}
		for _, k := range set.Keys {
			if k.Use == "enc" {
				continue
			}
			if !k.IsPublic() {
				if _, sym := k.Key.([]byte); !sym {
					k = k.Public()
				}
			}
			ks.static[k.KeyID] = k
		}
	}
	for kid, data := range o.SigningKeys {
		k, err := parsePEMKey(data)
		if err != nil {
			return nil, fmt.Errorf("auth: oauth2: signing key %q: %w", kid, err)
		}
		ks.static[kid] = jose.JSONWebKey{Key: k, KeyID: kid}
	}
	if len(o.SymmetricKey) > 0 {
		ks.static[o.SymmetricKeyID] = jose.JSONWebKey{Key: o.SymmetricKey, KeyID: o.SymmetricKeyID}
	}
	if o.JWKSURL != "" {
		u := o.JWKSURL
		ks.jwksURL.Store(&u)
	}
	if o.JWKSURL == "" && len(ks.static) == 0 && o.JWKSFile == "" && o.Issuer == "" && o.DiscoveryURL == "" {
		return nil, errors.New("auth: oauth2: no signing keys: set jwks_url, jwks_file, signing_keys, symmetric_key_file or issuer (discovery)")
	}
	return ks, nil
}

func (ks *keySource) hasSymmetric() bool {
	for _, k := range ks.static {
		if _, ok := k.Key.([]byte); ok {
			return true
		}
	}
	return false
}

// remoteConfigured: keys come from a JWKS URL, configured or discovered.
func (ks *keySource) remoteConfigured() bool {
	return ks.a.opts.JWKSURL != "" || ks.discoveryURL() != ""
}

// discoveryURL is the discovery document's address, when one is used: the
// configured one, or the issuer's when no other key source is set.
func (ks *keySource) discoveryURL() string {
	o := ks.a.opts
	if o.DiscoveryURL != "" {
		return o.DiscoveryURL
	}
	if o.Issuer != "" && o.JWKSURL == "" && o.JWKSFile == "" && len(o.SymmetricKey) == 0 && len(o.SigningKeys) == 0 {
		return strings.TrimSuffix(o.Issuer, "/") + "/.well-known/openid-configuration"
	}
	return ""
}

// start fetches the remote keys (and discovery document) once, waiting at
// most FetchTimeout.
func (ks *keySource) start() {
	if ks.remoteConfigured() {
		_ = ks.refresh(true) // logged by fetch
	}
}

func (ks *keySource) lookup(kid string) (jose.JSONWebKey, bool) {
	if k, ok := ks.static[kid]; ok {
		return k, true
	}
	if m := ks.remote.Load(); m != nil {
		k, ok := (*m)[kid]
		return k, ok
	}
	return jose.JSONWebKey{}, false
}

// key returns the verification key for kid, usable with alg.
func (ks *keySource) key(kid string, alg jose.SignatureAlgorithm) (any, error) {
	k, ok := ks.lookup(kid)
	if !ok && ks.remoteConfigured() {
		if err := ks.refresh(false); err != nil {
			if _, ok = ks.lookup(kid); !ok {
				return nil, tokenErr(TokenKeysUnavailable, "signing key %q unknown and the key set could not be fetched: %v", kid, err)
			}
		}
		k, ok = ks.lookup(kid)
	}
	if !ok {
		return nil, tokenErr(TokenUnknownKey, "no signing key with kid %q", kid)
	}
	_, sym := k.Key.([]byte)
	hmac := strings.HasPrefix(string(alg), "HS")
	if sym != hmac || (k.Algorithm != "" && k.Algorithm != string(alg)) {
		return nil, tokenErr(TokenBadAlgorithm, "algorithm %s does not fit key %q", alg, kid)
	}
	return k.Key, nil
}

// refresh fetches the key set unless one was started less than
// MinRefreshInterval ago (force ignores that), or joins the running fetch,
// and waits for it at most FetchTimeout. It returns the fetch's error, or
// the last one's when none was started.
func (ks *keySource) refresh(force bool) error {
	o := ks.a.opts
	ks.mu.Lock()
	ch := ks.inflight
	if ch == nil {
		if !force && !ks.lastStart.IsZero() && o.Now().Sub(ks.lastStart) < o.MinRefreshInterval {
			err := ks.lastErr
			ks.mu.Unlock()
			return err
		}
		ch = make(chan struct{})
		ks.inflight, ks.lastStart = ch, o.Now()
		go ks.fetch(ch)
	}
	ks.mu.Unlock()
	t := time.NewTimer(o.FetchTimeout)
	defer t.Stop()
	select {
	case <-ch:
		ks.mu.Lock()
		defer ks.mu.Unlock()
		return ks.lastErr
	case <-t.C:
		return fmt.Errorf("key set fetch did not finish within %s", o.FetchTimeout)
	}
}

// kick starts a fetch if none runs and none started within
// MinRefreshInterval, without waiting for it.
func (ks *keySource) kick() {
	o := ks.a.opts
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.inflight != nil || (!ks.lastStart.IsZero() && o.Now().Sub(ks.lastStart) < o.MinRefreshInterval) {
		return
	}
	ch := make(chan struct{})
	ks.inflight, ks.lastStart = ch, o.Now()
	go ks.fetch(ch)
}

func (ks *keySource) fetch(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), ks.a.opts.FetchTimeout)
	defer cancel()
	err := ks.fetchKeys(ctx)
	if err != nil {
		ks.a.log.Warn("oauth2: signing key refresh failed", "err", err)
	}
	ks.mu.Lock()
	ks.lastErr = err
	ks.inflight = nil
	ks.mu.Unlock()
	close(done)
}

func (ks *keySource) fetchKeys(ctx context.Context) error {
	if du := ks.discoveryURL(); du != "" {
		var d discoveryDoc
		if err := ks.getJSON(ctx, du, &d); err != nil {
			return fmt.Errorf("discovery: %w", err)
		}
		if iss := ks.a.opts.Issuer; iss != "" && d.Issuer != iss {
			return fmt.Errorf("discovery: issuer %q is not the configured %q", d.Issuer, iss)
		}
		ks.discovery.Store(&d)
		if ks.a.opts.JWKSURL == "" {
			if d.JWKSURI == "" {
				return errors.New("discovery document has no jwks_uri")
			}
			u := d.JWKSURI
			ks.jwksURL.Store(&u)
		}
	}
	up := ks.jwksURL.Load()
	if up == nil {
		return nil // static keys only
	}
	var set jose.JSONWebKeySet
	if err := ks.getJSON(ctx, *up, &set); err != nil {
		return fmt.Errorf("jwks: %w", err)
	}
	m := make(map[string]jose.JSONWebKey, len(set.Keys))
	for _, k := range set.Keys {
		if k.Use == "enc" {
			continue
		}
		if _, sym := k.Key.([]byte); sym {
			ks.a.log.Warn("oauth2: ignoring a symmetric key published at the JWKS URL", "kid", k.KeyID)
			continue
		}
		if !k.IsPublic() {
			k = k.Public()
		}
		m[k.KeyID] = k
	}
	if len(m) == 0 {
		return errors.New("jwks: no usable signing key")
	}
	ks.remote.Store(&m)
	return nil
}

func (ks *keySource) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := ks.a.opts.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxKeyDocument+1))
	if err != nil {
		return err
	}
	if len(data) > maxKeyDocument {
		return fmt.Errorf("GET %s: document larger than %d bytes", url, maxKeyDocument)
	}
	return json.Unmarshal(data, v)
}

// parsePEMKey reads a PEM public key: PKIX "PUBLIC KEY", PKCS#1 "RSA
// PUBLIC KEY", or the key of a "CERTIFICATE".
func parsePEMKey(data []byte) (any, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	switch b.Type {
	case "PUBLIC KEY":
		return x509.ParsePKIXPublicKey(b.Bytes)
	case "RSA PUBLIC KEY":
		return x509.ParsePKCS1PublicKey(b.Bytes)
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		return c.PublicKey, nil
	}
	return nil, fmt.Errorf("PEM block %q is not a public key or certificate", b.Type)
}
