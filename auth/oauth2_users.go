package auth

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Token users: a login whose password is an OAuth 2 access token gets a
// *User whose permissions, topic permissions and tags are the token's
// scopes (oauth2_scope.go), checked by the same Check, CheckVHost and
// TopicCache calls as database users, so every front end and the HTTP API
// apply them alike. A token user is not in the database: a token whose
// user name equals a database user's gets none of that user's
// permissions. Every check of a token user whose token has expired is
// refused; front ends also close such connections (ExpiryWatch).

// Authentication backends (Options.Backends), with RabbitMQ's module
// names accepted as aliases.
const (
	BackendInternal = "internal"
	BackendOAuth2   = "oauth2"
)

// AuditAccessDenied is the audit record of a refused authorization check.
const AuditAccessDenied = "authorization.denied"

// ErrUsernameChanged: UpdateSecret got a valid token naming another user.
var ErrUsernameChanged = errors.New("auth: not allowed to change username on refreshed token")

// tokenState is a token user's current grant, replaced by UpdateSecret.
type tokenState struct {
	g   atomic.Pointer[grant]
	ver atomic.Uint64 // incremented by each UpdateSecret
}

// CredentialVersion changes whenever u's token is replaced, so a front end
// that caches permission decisions knows to drop them; 0 for a database
// user.
func (u *User) CredentialVersion() uint64 {
	if u == nil || u.token == nil {
		return 0
	}
	return u.token.ver.Load()
}

func backendList(names []string, haveOAuth2 bool) ([]string, error) {
	if len(names) == 0 {
		if haveOAuth2 {
			return []string{BackendOAuth2, BackendInternal}, nil
		}
		return []string{BackendInternal}, nil
	}
	var out []string
	for _, n := range names {
		switch strings.TrimSpace(n) {
		case BackendInternal, "rabbit_auth_backend_internal":
			out = append(out, BackendInternal)
		case BackendOAuth2, "rabbit_auth_backend_oauth2":
			if !haveOAuth2 {
				return nil, errors.New("auth: backend oauth2 is listed but OAuth 2 is not configured")
			}
			out = append(out, BackendOAuth2)
		default:
			return nil, fmt.Errorf("auth: unknown authentication backend %q", n)
		}
	}
	return out, nil
}

// looksLikeJWT: three base64url parts, so a refusal is worth reporting as
// a token's rather than as a wrong password.
func looksLikeJWT(s string) bool {
	return strings.Count(s, ".") == 2 && len(s) > 16
}

// authToken validates token and makes a token user of it.
func (us *Users) authToken(token string) (*User, error) {
	if us.oauth2 == nil {
		return nil, ErrBadCredentials
	}
	g, err := us.oauth2.validate(token)
	if err != nil {
		return nil, err
	}
	u := &User{name: g.name, token: &tokenState{}}
	u.token.g.Store(g)
	return u, nil
}

// AuthenticateToken logs in with an OAuth 2 access token alone (HTTP
// Authorization: Bearer), rate-limited and audited as Authenticate.
func (us *Users) AuthenticateToken(token string, remote net.Addr) (*User, error) {
	key := limitKey(remote)
	if us.limit != nil {
		if until, blocked := us.limit.blocked(key); blocked {
			us.authFailed("", remote, ErrTooManyAttempts, AuditAuthBlocked, slog.Time("blocked_until", until))
			return nil, ErrTooManyAttempts
		}
	}
	u, err := us.authToken(token)
	if err != nil {
		if us.limit != nil && us.limit.fail(key) {
			us.log.Warn("login rate limit: blocking source address", "remote", addrString(remote), "backoff", us.limit.backoff)
		}
		us.authFailed("", remote, err, AuditAuthFailure)
		return nil, err
	}
	us.authSucceeded("", u, remote)
	return u, nil
}

func (us *Users) authSucceeded(name string, u *User, remote net.Addr) {
	if us.audit == nil {
		return
	}
	if u.token == nil {
		us.audit.Info(AuditAuthSuccess, "user", name, "remote", addrString(remote), "backend", BackendInternal)
		return
	}
	g := u.token.g.Load()
	attrs := []any{"user", u.name, "remote", addrString(remote), "backend", BackendOAuth2, "sub", g.sub}
	if !g.exp.IsZero() {
		attrs = append(attrs, "expires", g.exp.UTC().Format(time.RFC3339))
	}
	us.audit.Info(AuditAuthSuccess, attrs...)
}

// UpdateSecret replaces the credentials of an authenticated connection's
// user (AMQP connection.update-secret). For a token user, secret must be a
// valid token naming the same user; its scopes replace the old ones at
// once for every check of u. For a database user, secret must be the
// user's password. Failures are rate-limited and audited as logins.
func (us *Users) UpdateSecret(u *User, secret string, remote net.Addr) error {
	if u.token == nil {
		nu, err := us.Authenticate(u.name, secret, remote)
		if err != nil {
			return err
		}
		if nu.token != nil || nu.name != u.name {
			return ErrUsernameChanged
		}
		return nil
	}
	key := limitKey(remote)
	if us.limit != nil {
		if _, blocked := us.limit.blocked(key); blocked {
			us.authFailed(u.name, remote, ErrTooManyAttempts, AuditAuthBlocked)
			return ErrTooManyAttempts
		}
	}
	var g *grant
	var err error
	if us.oauth2 == nil {
		err = ErrBadCredentials
	} else if g, err = us.oauth2.validate(secret); err == nil && g.name != u.name {
		err = tokenErr(TokenUserChanged, "token names user %q, the connection's is %q", g.name, u.name)
	}
	if err != nil {
		if us.limit != nil {
			us.limit.fail(key)
		}
		us.authFailed(u.name, remote, err, AuditAuthFailure, "update_secret", true)
		return err
	}
	u.token.g.Store(g)
	u.token.ver.Add(1)
	if us.audit != nil {
		attrs := []any{"user", u.name, "remote", addrString(remote), "backend", BackendOAuth2, "update_secret", true}
		if !g.exp.IsZero() {
			attrs = append(attrs, "expires", g.exp.UTC().Format(time.RFC3339))
		}
		us.audit.Info(AuditAuthSuccess, attrs...)
	}
	return nil
}

// Expiry returns when u's token expires; zero for a database user or a
// token without exp.
func (u *User) Expiry() time.Time {
	if u == nil || u.token == nil {
		return time.Time{}
	}
	return u.token.g.Load().exp
}

// IsToken reports whether u logged in with an OAuth 2 token.
func (u *User) IsToken() bool { return u != nil && u.token != nil }

// Scopes returns a token user's scopes (prefix dropped), nil otherwise.
func (u *User) Scopes() []string {
	if u == nil || u.token == nil {
		return nil
	}
	return append([]string(nil), u.token.g.Load().scopes...)
}

func (us *Users) now() time.Time {
	if us.oauth2 != nil {
		return us.oauth2.opts.Now()
	}
	return time.Now()
}

func (us *Users) liveGrant(u *User) *grant {
	g := u.token.g.Load()
	if g.expired(us.now()) {
		return nil
	}
	return g
}

func (us *Users) tokenVHostAccess(u *User, vhost string) bool {
	g := us.liveGrant(u)
	return g != nil && g.vhostAccess(vhost)
}

func (us *Users) tokenResourceAccess(u *User, vhost string, perm Perm, name string) bool {
	g := us.liveGrant(u)
	return g != nil && g.resourceAccess(vhost, perm, name)
}

func (us *Users) tokenTopicAccess(u *User, vhost string, perm Perm, exchange, key string) bool {
	g := us.liveGrant(u)
	return g != nil && g.topicAccess(vhost, perm, exchange, key)
}

// denied records an authorization refusal in the audit log and returns e.
func (us *Users) denied(u *User, e *AccessError) error {
	if us.audit != nil {
		backend := BackendInternal
		if u.IsToken() {
			backend = BackendOAuth2
		}
		attrs := []any{"user", e.User, "vhost", e.VHost, "backend", backend}
		if e.Kind != "" {
			attrs = append(attrs, "perm", e.Perm.String(), "kind", e.Kind, "name", e.Name)
		}
		if e.Kind == "topic" {
			attrs = append(attrs, "routing_key", e.Topic)
		}
		if u.IsToken() && us.liveGrant(u) == nil {
			attrs = append(attrs, "reason", TokenExpired)
		}
		us.audit.Info(AuditAccessDenied, attrs...)
	}
	return e
}

// ExpiryWatch calls a function once a token user's token has expired,
// following refreshes: when its timer fires early because the token was
// refreshed, it waits for the new expiry. The function is called at most
// once.
type ExpiryWatch struct {
	u  *User
	fn func()

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

// WatchExpiry starts watching u; nil (and no call) for a user whose
// credentials do not expire. Stop it when the connection ends.
func WatchExpiry(u *User, expired func()) *ExpiryWatch {
	if u.Expiry().IsZero() {
		return nil
	}
	w := &ExpiryWatch{u: u, fn: expired}
	w.mu.Lock()
	w.armLocked()
	w.mu.Unlock()
	return w
}

func (w *ExpiryWatch) armLocked() {
	if w.t != nil {
		w.t.Stop()
	}
	w.t = time.AfterFunc(max(time.Until(w.u.Expiry()), 0), w.fire)
}

func (w *ExpiryWatch) fire() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	if exp := w.u.Expiry(); !exp.IsZero() && time.Now().Before(exp) {
		w.armLocked() // refreshed meanwhile
		w.mu.Unlock()
		return
	}
	w.stopped = true
	w.mu.Unlock()
	w.fn()
}

// Reset re-reads the expiry after a refresh (a token that expires sooner
// than the one it replaced). Safe on nil.
func (w *ExpiryWatch) Reset() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.armLocked()
	}
}

// Stop ends the watch. Safe on nil.
func (w *ExpiryWatch) Stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
}

// TokenLogins reports whether OAuth 2 tokens are accepted as passwords.
func (us *Users) TokenLogins() bool { return slices.Contains(us.backends, BackendOAuth2) }
