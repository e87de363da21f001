package auth

import (
	"slices"
	"strings"
)

// Scope extraction from a token's claims, in RabbitMQ's order
// (rabbit_auth_backend_oauth2:normalize_token_scope/2): the "scope" claim
// (a space-separated string or a list), the scopes of a UMA requesting
// party token (authorization.permissions[].scopes), the claims named by
// additional_scopes_key, then scope aliases; finally only scopes carrying
// the scope prefix are kept, without it.

// rptScopesPath is where a requesting party token (Keycloak, WSO2) keeps
// its scopes.
const rptScopesPath = "authorization.permissions.scopes"

func (o *OAuth2) tokenScopes(claims map[string]any) ([]string, error) {
	scopes := scopeList(claims["scope"])
	scopes = append(o.claimValues(claims, rptScopesPath), scopes...)
	for _, p := range strings.Fields(o.opts.AdditionalScopesKey) {
		scopes = append(o.claimValues(claims, p), scopes...)
	}
	if len(o.opts.ScopeAliases) > 0 {
		n := len(scopes)
		for _, s := range scopes[:n] {
			scopes = append(scopes, o.opts.ScopeAliases[s]...)
		}
	}
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		if rest, ok := strings.CutPrefix(s, o.prefix); ok {
			out = append(out, rest)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxScopes {
		return nil, tokenErr(TokenTooManyScopes, "token carries more than %d scopes", maxScopes)
	}
	return out, nil
}

// scopeList reads a scope value: a space-separated string, or a list of
// strings.
func scopeList(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// claimValues follows a dotted path through maps and lists of maps and
// returns the scopes found at its end: a list or a string as scopes, a map
// by its entry for the resource server id, prefixed with "<id>.".
func (o *OAuth2) claimValues(claims map[string]any, path string) []string {
	keys := strings.FieldsFunc(path, func(r rune) bool { return r == '.' })
	if len(keys) == 0 {
		return nil
	}
	var out []string
	var walk func(v any, keys []string, depth int)
	walk = func(v any, keys []string, depth int) {
		if depth > 32 {
			return
		}
		if len(keys) == 0 {
			out = append(out, o.scopeValue(v)...)
			return
		}
		switch v := v.(type) {
		case map[string]any:
			if next, ok := v[keys[0]]; ok {
				walk(next, keys[1:], depth+1)
			}
		case []any:
			for _, e := range v {
				if m, ok := e.(map[string]any); ok {
					walk(m, keys, depth+1)
				}
			}
		}
	}
	walk(claims, keys, 0)
	return out
}

func (o *OAuth2) scopeValue(v any) []string {
	switch v := v.(type) {
	case string, []any:
		var out []string
		if l, ok := v.([]any); ok {
			for _, e := range l {
				if _, isMap := e.(map[string]any); !isMap {
					out = append(out, scopeList(e)...)
				}
			}
			return out
		}
		return scopeList(v)
	case map[string]any:
		var out []string
		for _, s := range scopeList(v[o.opts.ResourceServerID]) {
			out = append(out, o.opts.ResourceServerID+"."+s)
		}
		return out
	}
	return nil
}

// usernameFrom returns the first preferred username claim the token has as
// a string, or "unknown", as RabbitMQ does.
func (o *OAuth2) usernameFrom(claims map[string]any) string {
	for _, c := range o.opts.PreferredUsernameClaims {
		if s, ok := claims[c].(string); ok && s != "" {
			return s
		}
	}
	return "unknown"
}
