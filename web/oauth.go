package web

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/trident-broker/trident/auth"
)

// OAuthUI configures the management UI's OAuth 2 login (RabbitMQ's
// management.oauth_* settings). The UI runs the authorization-code flow
// with PKCE itself, as a public client (or with ClientSecret), against the
// provider's endpoints, then calls the API with the access token as
// "Authorization: Bearer". The provider must allow the UI's origin (CORS)
// on its token endpoint and list the UI's address as a redirect URI.
type OAuthUI struct {
	Enabled      bool
	ClientID     string
	ClientSecret string
	// ProviderURL is the provider's issuer URL, shown to the user;
	// AuthorizationEndpoint and TokenEndpoint override the endpoints the
	// broker found in the provider's discovery document.
	ProviderURL           string
	AuthorizationEndpoint string
	TokenEndpoint         string
	// Scopes asked for, space-separated.
	Scopes string
	// Endpoints returns the discovered endpoints (may be nil).
	Endpoints func() (authorization, token string)
}

// bearerToken returns the token of an "Authorization: Bearer" header.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:]), true
	}
	return "", false
}

// authSettings serves GET /api/auth, without authentication: what the UI
// needs to offer an OAuth 2 login.
func (s *Server) authSettings(w http.ResponseWriter, _ *http.Request) {
	o := s.oauth
	out := map[string]any{"oauth_enabled": o.Enabled}
	if o.Enabled {
		authz, tok := s.oauthEndpoints()
		out["oauth_client_id"] = o.ClientID
		if o.ClientSecret != "" {
			out["oauth_client_secret"] = o.ClientSecret
		}
		out["oauth_provider_url"] = o.ProviderURL
		out["oauth_scopes"] = o.Scopes
		out["oauth_authorization_endpoint"] = authz
		out["oauth_token_endpoint"] = tok
		out["oauth_response_type"] = "code"
	}
	writeJSON(w, http.StatusOK, out)
}

// uiConnectOrigins are the origins besides its own the UI fetches from:
// the OAuth 2 token endpoint's, when the OAuth 2 login is on.
func (s *Server) uiConnectOrigins() []string {
	if !s.oauth.Enabled {
		return nil
	}
	_, tok := s.oauthEndpoints()
	u, err := url.Parse(tok)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil
	}
	return []string{u.Scheme + "://" + u.Host}
}

// oauthEndpoints are the configured endpoints, else the discovered ones.
func (s *Server) oauthEndpoints() (authz, tok string) {
	o := s.oauth
	authz, tok = o.AuthorizationEndpoint, o.TokenEndpoint
	if o.Endpoints != nil {
		a, t := o.Endpoints()
		if authz == "" {
			authz = a
		}
		if tok == "" {
			tok = t
		}
	}
	return authz, tok
}

// tokenRefusal is the 401 reason for a refused bearer token.
func tokenRefusal(err error) string {
	if r := auth.TokenReason(err); r != "" {
		return "Login failed: token refused (" + r + ")"
	}
	return "Login failed"
}
