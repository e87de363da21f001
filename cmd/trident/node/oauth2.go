package node

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/web"
)

// oauth2 builds the token validator from oauth2.*, or nil when OAuth 2 is
// off. It fetches the provider's keys once (bounded by
// oauth2.fetch_timeout); a failure there is logged, not fatal.
func (n *Node) oauth2() (*auth.OAuth2, error) {
	o := n.cfg.OAuth2
	if !o.Enabled() {
		return nil, nil
	}
	opts := auth.OAuth2Options{
		ResourceServerID:        o.ResourceServerID,
		ScopePrefix:             o.ScopePrefix,
		VerifyAud:               o.VerifyAud,
		RequireExp:              o.RequireExp,
		Issuer:                  o.Issuer,
		DiscoveryURL:            o.DiscoveryURL,
		JWKSURL:                 o.JWKSURL,
		JWKSFile:                o.JWKSFile,
		SymmetricKeyID:          o.SymmetricKeyID,
		DefaultKey:              o.DefaultKey,
		Algorithms:              o.Algorithms,
		PreferredUsernameClaims: o.PreferredUsernameClaims,
		AdditionalScopesKey:     o.AdditionalScopesKey,
		ScopePatternSyntax:      o.ScopePatternSyntax,
		FetchTimeout:            o.FetchTimeout,
		MinRefreshInterval:      o.MinRefreshInterval,
		Log:                     n.log.With("component", "oauth2"),
	}
	if opts.AdditionalScopesKey == "" {
		opts.AdditionalScopesKey = o.ExtraScopesSource
	}
	if len(o.ScopeAliases) > 0 {
		opts.ScopeAliases = map[string][]string{}
		for k, v := range o.ScopeAliases {
			opts.ScopeAliases[k] = strings.Fields(v)
		}
	}
	for kid, path := range o.SigningKeys {
		k, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("node: oauth2.signing_keys %s: %w", kid, err)
		}
		if opts.SigningKeys == nil {
			opts.SigningKeys = map[string][]byte{}
		}
		opts.SigningKeys[kid] = k
	}
	if o.SymmetricKeyFile != "" {
		k, err := os.ReadFile(o.SymmetricKeyFile)
		if err != nil {
			return nil, fmt.Errorf("node: oauth2.symmetric_key_file: %w", err)
		}
		opts.SymmetricKey = k
	}
	if o.CACertFile != "" {
		pem, err := os.ReadFile(o.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("node: oauth2.ca_cert_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("node: oauth2.ca_cert_file %s: no certificate", o.CACertFile)
		}
		opts.HTTPClient = &http.Client{Timeout: o.FetchTimeout,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	a, err := auth.NewOAuth2(opts)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return a, nil
}

// oauthUI is the management UI's OAuth 2 login configuration.
func (n *Node) oauthUI() web.OAuthUI {
	h := n.cfg.HTTP
	ui := web.OAuthUI{Enabled: h.OAuthEnabled && n.oauth != nil, ClientID: h.OAuthClientID, ClientSecret: h.OAuthClientSecret,
		ProviderURL: h.OAuthProviderURL, Scopes: h.OAuthScopes}
	if ui.ProviderURL == "" {
		ui.ProviderURL = n.cfg.OAuth2.Issuer
	}
	if ui.Scopes == "" {
		ui.Scopes = "openid profile " + n.cfg.OAuth2.ResourceServerID + ".tag:administrator"
	}
	if n.oauth != nil {
		ui.Endpoints = n.oauth.Endpoints
	}
	return ui
}
