package auth

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// OAuth 2 scopes, in the format of RabbitMQ's rabbitmq_auth_backend_oauth2
// (rabbit_oauth2_scope.erl, wildcard.erl), after the resource server's
// scope prefix ("<resource_server_id>." by default) is dropped:
//
//	read:<vhost>/<resource>            read permission on a resource
//	write:<vhost>/<resource>[/<key>]   with a routing key: topic permission
//	configure:<vhost>/<resource>
//	tag:<tag>                          administrator, management, monitoring...
//
// Each pattern part is a wildcard: "*" matches any run of characters,
// everything else matches itself after URL-decoding ("%2F" is "/", "+" a
// space). Matching is RabbitMQ's first-occurrence scan, not a
// backtracking glob: "*b" does not match "bab". A permission scope
// without a routing-key part grants no topic access, so publishing to a
// topic exchange needs e.g. write:*/*/*. With the regex syntax
// (ScopePatternSyntax) each part is instead an RE2 expression matched
// against the whole name. "{vhost}" in a scope stands for
// the vhost being checked, "{<claim>}" for the string value of a token
// claim (the claim's name if the token has none); both match only
// literally, whatever characters the value holds (literalPart).

// maxScopes bounds the scopes one token may carry (RabbitMQ's
// MAX_SCOPE_COUNT).
const maxScopes = 2048

// scopePerm is one parsed permission scope.
type scopePerm struct {
	perm                  Perm
	vhost, resource, rkey pattern
	hasRKey               bool
}

// pattern is a wildcard pattern split at its "*"s and URL-decoded once,
// or with the regex syntax a compiled expression; one that uses "{vhost}"
// is kept raw and prepared per check.
type pattern struct {
	raw     string
	parts   []string       // wildcard syntax; nil when invalid or vhost
	re      *regexp.Regexp // regex syntax; nil when invalid or vhost
	regex   bool
	invalid bool
	vhost   bool // contains {vhost}
}

func compilePattern(raw string, regex bool) pattern {
	p := pattern{raw: raw, regex: regex, vhost: strings.Contains(raw, "{vhost}")}
	if !p.vhost {
		if regex {
			p.re = compileScopeRegex(raw)
			p.invalid = p.re == nil
		} else {
			p.parts, p.invalid = splitPattern(raw)
		}
	}
	return p
}

func (p *pattern) match(vhost, subject string) bool {
	switch {
	case p.vhost:
		lit, ok := literalPart(vhost, p.regex)
		if !ok {
			return false
		}
		if p.regex {
			re := compileScopeRegex(strings.ReplaceAll(p.raw, "{vhost}", lit))
			return re != nil && re.MatchString(subject)
		}
		return wildcardMatch(subject, strings.ReplaceAll(p.raw, "{vhost}", lit))
	case p.invalid:
		return false
	case p.regex:
		return p.re.MatchString(subject)
	}
	return matchParts(subject, p.parts)
}

// Limits of the regex scope syntax, as RabbitMQ's: patterns of at most
// 2048 bytes, without inline modifiers, callouts, comments or control
// verbs. Go's RE2 has no backtracking, so RabbitMQ's match limits have no
// counterpart here.
const maxScopeRegex = 2048

var rejectedRegexConstructs = []string{"(?i", "(?I", "(?m", "(?M", "(?s", "(?S", "(?x", "(?X", "(?J", "(?U", "(?n", "(?-", "(?C", "(?#", "(*"}

// compileScopeRegex compiles a regex scope part matched against the whole
// subject; nil when it is refused or does not compile (it matches nothing).
func compileScopeRegex(p string) *regexp.Regexp {
	if len(p) > maxScopeRegex {
		return nil
	}
	for _, c := range rejectedRegexConstructs {
		if strings.Contains(p, c) {
			return nil
		}
	}
	re, err := regexp.Compile(`\A(?:` + p + `)\z`)
	if err != nil {
		return nil
	}
	return re
}

// grant is what a validated token allows: it replaces the permission
// records of the user database for a token user.
type grant struct {
	name   string
	tags   []string
	scopes []string // normalized, prefix dropped, sorted, unique
	perms  []scopePerm
	exp    time.Time // zero: the token has no exp (require_exp off)
	sub    string
}

// parseScope parses one normalized scope (prefix already dropped) into a
// permission, expanding claim variables. ok is false for a scope that is
// not a permission scope (a tag, or anything else).
func parseScope(s string, claims map[string]any, regex bool) (scopePerm, bool) {
	var sp scopePerm
	switch {
	case strings.HasPrefix(s, "read:"):
		sp.perm, s = Read, s[len("read:"):]
	case strings.HasPrefix(s, "write:"):
		sp.perm, s = Write, s[len("write:"):]
	case strings.HasPrefix(s, "configure:"):
		sp.perm, s = Configure, s[len("configure:"):]
	default:
		return sp, false
	}
	s, ok := expandClaims(s, claims, regex)
	if !ok {
		return sp, false
	}
	parts := strings.Split(s, "/")
	switch len(parts) {
	case 2:
		sp.vhost, sp.resource = compilePattern(parts[0], regex), compilePattern(parts[1], regex)
	case 3:
		sp.vhost, sp.resource, sp.rkey = compilePattern(parts[0], regex), compilePattern(parts[1], regex), compilePattern(parts[2], regex)
		sp.hasRKey = true
	default:
		return sp, false
	}
	return sp, true
}

// expandClaims replaces "{name}" by the string claim name, leaving
// "{vhost}" for check time. A claim the token lacks, or that is not a
// string, is replaced by its name, as RabbitMQ does. The value is escaped
// so that it matches only itself (literalPart): a sub of "*" or ".*"
// grants the queue named q-* and nothing else, and a "/" in a value does
// not start another part of the scope. An unclosed "{", a name
// containing '.', '*' or '{', or a value that cannot stand for a name
// (not UTF-8, or with a NUL) makes the scope invalid (ok false): it
// grants nothing.
func expandClaims(s string, claims map[string]any, regex bool) (string, bool) {
	if !strings.Contains(s, "{") {
		return s, true
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			b.WriteString(s)
			return b.String(), true
		}
		b.WriteString(s[:i])
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return "", false
		}
		name := s[i+1 : i+j]
		if strings.ContainsAny(name, ".*{") {
			return "", false
		}
		v, ok := claims[name].(string)
		if !ok {
			v = name
		}
		if name == "vhost" {
			b.WriteString("{vhost}")
		} else {
			lit, ok := literalPart(v, regex)
			if !ok {
				return "", false
			}
			b.WriteString(lit)
		}
		s = s[i+j+1:]
	}
}

// literalPart escapes v for the pattern language in use so that, put into
// a scope part, it matches exactly v: with the wildcard syntax it is
// URL-encoded (a part is split at "*" and then URL-decoded, so "%2A" is a
// literal "*", "%2F" a "/", "%25" a "%"); with the regex syntax it is
// quoted (regexp.QuoteMeta) and its "/"s, which would split the scope, are
// written "\x2f". ok is false for a value no name can be: not UTF-8, or
// holding a NUL.
func literalPart(v string, regex bool) (string, bool) {
	if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
		return "", false
	}
	if regex {
		return strings.ReplaceAll(regexp.QuoteMeta(v), "/", `\x2f`), true
	}
	return url.QueryEscape(v), true
}

// wildcardMatch is RabbitMQ's wildcard:match/2.
func wildcardMatch(subject, pattern string) bool {
	parts, invalid := splitPattern(pattern)
	return !invalid && matchParts(subject, parts)
}

// splitPattern splits a pattern at "*" and URL-decodes the parts; invalid
// is true when a part does not decode (such a pattern matches nothing).
func splitPattern(pattern string) (parts []string, invalid bool) {
	parts = strings.Split(pattern, "*")
	for i, p := range parts {
		d, err := url.QueryUnescape(p)
		if err != nil {
			return nil, true
		}
		parts[i] = d
	}
	return parts, false
}

// matchParts is RabbitMQ's scan: the first part is a prefix, each later
// one is found at its first occurrence after the previous one, a pattern
// ending in "*" matches any rest.
func matchParts(subject string, parts []string) bool {
	if !strings.HasPrefix(subject, parts[0]) {
		return false
	}
	pos, rest := len(parts[0]), parts[1:]
	for {
		switch {
		case len(rest) == 1 && rest[0] == "":
			return true // ends with a wildcard
		case len(rest) == 0:
			return pos == len(subject)
		case pos == len(subject):
			return false
		case rest[0] == "":
			rest = rest[1:] // "**"
			continue
		}
		i := strings.Index(subject[pos:], rest[0])
		if i < 0 {
			return false
		}
		pos += i + len(rest[0])
		rest = rest[1:]
	}
}

func (g *grant) expired(now time.Time) bool {
	return !g.exp.IsZero() && !now.Before(g.exp)
}

// vhostAccess: any permission scope whose vhost pattern matches.
func (g *grant) vhostAccess(vhost string) bool {
	for i := range g.perms {
		if g.perms[i].vhost.match(vhost, vhost) {
			return true
		}
	}
	return false
}

func (g *grant) resourceAccess(vhost string, perm Perm, name string) bool {
	for i := range g.perms {
		sp := &g.perms[i]
		if sp.perm == perm && sp.vhost.match(vhost, vhost) && sp.resource.match(vhost, name) {
			return true
		}
	}
	return false
}

func (g *grant) topicAccess(vhost string, perm Perm, exchange, key string) bool {
	for i := range g.perms {
		sp := &g.perms[i]
		if sp.hasRKey && sp.perm == perm && sp.vhost.match(vhost, vhost) &&
			sp.resource.match(vhost, exchange) && sp.rkey.match(vhost, key) {
			return true
		}
	}
	return false
}

// tagsFromScopes returns the "tag:" scopes without their prefix, sorted.
func tagsFromScopes(scopes []string) []string {
	var tags []string
	for _, s := range scopes {
		if t, ok := strings.CutPrefix(s, "tag:"); ok && t != "" {
			tags = append(tags, t)
		}
	}
	slices.Sort(tags)
	return slices.Compact(tags)
}
