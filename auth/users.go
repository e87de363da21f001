package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Store is the durable metadata storage auth needs; the broker's store
// implements it. Writes must be durable when they return.
type Store interface {
	PutMeta(key string, val []byte) error
	DeleteMeta(key string) error
	// LoadMeta calls fn for each record whose key starts with prefix.
	LoadMeta(prefix string, fn func(key string, val []byte) error) error
}

// Key prefixes of auth's records in the Store.
const (
	userPrefix = "user/"
	permPrefix = "perm/"
)

// Options configures New.
type Options struct {
	// DefaultUser is created with DefaultPass, tag administrator and full
	// permissions on DefaultVHost when the store holds no user. Empty: none.
	DefaultUser  string
	DefaultPass  string
	DefaultVHost string // "/" when empty
	// LoopbackUsers may authenticate only from a loopback address.
	LoopbackUsers []string

	// FailedLoginLimit failed logins from one source address (an IPv6
	// address counts by its /64) block it for FailedLoginBackoff:
	// Authenticate then returns ErrTooManyAttempts at once. The allowance
	// refills at FailedLoginLimit per FailedLoginBackoff. 0 takes
	// DefaultFailedLoginLimit, negative disables the limit; 0 backoff takes
	// DefaultFailedLoginBackoff.
	FailedLoginLimit   int
	FailedLoginBackoff time.Duration
	// Log receives a warning for each failed login (nil: discarded).
	Log *slog.Logger
	// Audit receives the audit records (see OpenAudit); nil: off.
	Audit *slog.Logger

	// OAuth2, when set, validates JWT access tokens given as passwords
	// (oauth2_users.go).
	OAuth2 *OAuth2
	// Backends is the ordered list of authentication backends tried by
	// Authenticate, as RabbitMQ's auth_backends: BackendInternal and
	// BackendOAuth2. Empty: oauth2 then internal when OAuth2 is set,
	// internal alone otherwise.
	Backends []string

	// Replicator, in a cluster, writes the user database's records
	// (users, permissions, topic permissions) while the cluster's
	// topology commands are off: the records every node holds
	// (cluster/meta.Replicator). nil (standalone): they go to the Store,
	// which then keeps only this node's records.
	Replicator Replicator
}

// Replicator writes records cluster-wide and returns once they are
// committed: keys[i] gets vals[i], or is deleted when vals[i] is nil.
type Replicator interface {
	ReplicateMeta(keys []string, vals [][]byte) error
}

// User is an immutable view of a user at the time it was looked up.
type User struct {
	name string
	tags []string
	hash []byte // salt + digest; nil means no password
	alg  string
	// token is set for a user logged in with an OAuth 2 token: its
	// permissions are the token's scopes, not records of the database,
	// and change when the token is refreshed (UpdateSecret).
	token *tokenState
}

// Name returns the user's name.
func (u *User) Name() string { return u.name }

// Tags returns a copy of the user's tags (administrator, monitoring,
// management, policymaker, or any other string). A token user's tags are
// its token's tag scopes.
func (u *User) Tags() []string {
	if u.token != nil {
		return slices.Clone(u.token.g.Load().tags)
	}
	return slices.Clone(u.tags)
}

// HasTag reports whether the user carries tag.
func (u *User) HasTag(tag string) bool {
	if u.token != nil {
		return slices.Contains(u.token.g.Load().tags, tag)
	}
	return slices.Contains(u.tags, tag)
}

// PasswordHash returns the hash as RabbitMQ exports it (base64 of salt and
// digest), or "" for a user without a password.
func (u *User) PasswordHash() string {
	if u.hash == nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(u.hash)
}

// HashingAlgorithm returns RabbitMQ's name for the hash algorithm
// (HashSHA256 for every password set through PutUser).
func (u *User) HashingAlgorithm() string {
	if u.alg == "" {
		return HashSHA256
	}
	return u.alg
}

// userRecord is a user's stored JSON form, shaped like definitions.json.
type userRecord struct {
	Name             string   `json:"name"`
	PasswordHash     string   `json:"password_hash"`
	HashingAlgorithm string   `json:"hashing_algorithm"`
	Tags             []string `json:"tags"`
}

// snapshot is an immutable state of all users and permissions. Writers
// copy the parts they change and publish a new snapshot.
type snapshot struct {
	users map[string]*User
	perms map[string]map[string]*permission // user → vhost → permission
	// tperms: user → vhost → exchange → topic permission
	tperms map[string]map[string]map[string]*topicPermission
}

func (s *snapshot) perm(user, vhost string) *permission {
	return s.perms[user][vhost]
}

// clone copies the top-level maps; per-user vhost maps are shared and must
// be replaced, not modified, via withPerm.
func (s *snapshot) clone() *snapshot {
	n := &snapshot{
		users:  make(map[string]*User, len(s.users)+1),
		perms:  make(map[string]map[string]*permission, len(s.perms)+1),
		tperms: make(map[string]map[string]map[string]*topicPermission, len(s.tperms)+1),
	}
	for k, v := range s.users {
		n.users[k] = v
	}
	for k, v := range s.perms {
		n.perms[k] = v
	}
	for k, v := range s.tperms {
		n.tperms[k] = v
	}
	return n
}

// withPerm sets (p != nil) or removes (p == nil) user's permission in vhost
// on a cloned snapshot.
func (s *snapshot) withPerm(user, vhost string, p *permission) {
	m := make(map[string]*permission, len(s.perms[user])+1)
	for k, v := range s.perms[user] {
		m[k] = v
	}
	if p == nil {
		delete(m, vhost)
	} else {
		m[vhost] = p
	}
	if len(m) == 0 {
		delete(s.perms, user)
	} else {
		s.perms[user] = m
	}
}

// Users is the user and permission database. It is safe for concurrent use;
// reads take no lock.
type Users struct {
	st       Store
	repl     Replicator // nil: records go to st (Options.Replicator)
	loopback map[string]bool
	limit    *limiter     // nil: no rate limit
	log      *slog.Logger // never nil
	audit    *slog.Logger // nil: off
	oauth2   *OAuth2      // nil: no token logins
	backends []string

	// wmu serialises Apply's writers (held across a cluster proposal);
	// mu serialises snapshot swaps (store write, then swap; the cluster's
	// ApplyCommitted and ApplyMeta). Lock order: wmu, then mu.
	wmu      sync.Mutex
	mu       sync.Mutex
	snap     atomic.Pointer[snapshot]
	proposer atomic.Pointer[proposerBox] // command.go; nil: standalone

	reloadPending atomic.Bool // ApplyMeta's deferred reload is queued (cluster.go)

	events atomic.Pointer[eventSink] // events.go; nil: none
}

// New loads users and permissions from st and, when there is no user at
// all, creates Options.DefaultUser. Permission records of users that no
// longer exist (left by an interrupted DeleteUser) are deleted.
func New(st Store, opts Options) (*Users, error) {
	us := &Users{st: st, repl: opts.Replicator, loopback: make(map[string]bool), log: opts.Log, audit: opts.Audit, oauth2: opts.OAuth2}
	if us.log == nil {
		us.log = discardLogger
	}
	bs, err := backendList(opts.Backends, opts.OAuth2 != nil)
	if err != nil {
		return nil, err
	}
	us.backends = bs
	switch {
	case opts.FailedLoginLimit == 0:
		us.limit = newLimiter(DefaultFailedLoginLimit, opts.FailedLoginBackoff)
	case opts.FailedLoginLimit > 0:
		us.limit = newLimiter(opts.FailedLoginLimit, opts.FailedLoginBackoff)
	}
	for _, n := range opts.LoopbackUsers {
		us.loopback[n] = true
	}
	s, orphans, err := loadSnapshot(st)
	if err != nil {
		return nil, err
	}
	for _, k := range orphans {
		del := func() error { return st.DeleteMeta(k) }
		if us.repl != nil {
			del = func() error { return us.repl.ReplicateMeta([]string{k}, [][]byte{nil}) }
		}
		if err := del(); err != nil {
			return nil, fmt.Errorf("auth: delete orphan %s: %w", k, err)
		}
	}
	us.snap.Store(s)

	if len(s.users) == 0 && opts.DefaultUser != "" {
		vhost := opts.DefaultVHost
		if vhost == "" {
			vhost = "/"
		}
		if err := us.PutUser(opts.DefaultUser, opts.DefaultPass, []string{"administrator"}); err != nil {
			return nil, err
		}
		if err := us.SetPermissions(opts.DefaultUser, vhost, ".*", ".*", ".*"); err != nil {
			return nil, err
		}
	}
	return us, nil
}

// loadSnapshot reads every user, permission and topic permission record
// from st, each replayed as the command that made it (applyTo, the code
// every change takes); permission records of users that do not exist
// are returned as orphans.
func loadSnapshot(st Store) (_ *snapshot, orphans []string, err error) {
	s := &snapshot{users: map[string]*User{}, perms: map[string]map[string]*permission{},
		tperms: map[string]map[string]map[string]*topicPermission{}}
	err = st.LoadMeta(userPrefix, func(key string, val []byte) error {
		var r userRecord
		if err := json.Unmarshal(val, &r); err != nil {
			return fmt.Errorf("auth: load %s: %w", key, err)
		}
		if r.Name == "" {
			return fmt.Errorf("auth: load %s: bad record", key)
		}
		if _, err := applyTo(s, Command{Op: OpPutUser, User: r.Name, PasswordHash: r.PasswordHash, Tags: r.Tags}, true); err != nil {
			return fmt.Errorf("auth: load %s: bad record: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = st.LoadMeta(permPrefix, func(key string, val []byte) error {
		var p Permission
		if err := json.Unmarshal(val, &p); err != nil {
			return fmt.Errorf("auth: load %s: %w", key, err)
		}
		if s.users[p.User] == nil {
			orphans = append(orphans, key)
			return nil
		}
		c := Command{Op: OpSetPermissions, User: p.User, VHost: p.VHost, Configure: p.Configure, Write: p.Write, Read: p.Read}
		if _, err := applyTo(s, c, true); err != nil {
			return fmt.Errorf("auth: load %s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	tOrphans, err := loadTopicPerms(st, s)
	if err != nil {
		return nil, nil, err
	}
	orphans = append(orphans, tOrphans...)
	return s, orphans, nil
}

// Authenticate checks name and password. It returns ErrBadCredentials for
// an unknown user, a wrong or empty password or a user without password,
// and ErrLoopbackOnly for a loopback-only user connecting from elsewhere.
// The password comparison is constant-time, and an unknown user costs a
// hash computation like a known one.
//
// Failed logins are rate-limited per source address (see
// Options.FailedLoginLimit): while an address is blocked, Authenticate
// returns ErrTooManyAttempts without checking the password. Every failure
// is logged, and successes and failures are audit records.
func (us *Users) Authenticate(name, password string, remote net.Addr) (*User, error) {
	key := limitKey(remote)
	if us.limit != nil {
		if until, blocked := us.limit.blocked(key); blocked {
			us.authFailed(name, remote, ErrTooManyAttempts, AuditAuthBlocked, slog.Time("blocked_until", until))
			return nil, ErrTooManyAttempts
		}
	}
	var u *User
	var err, internalErr, tokenErr error
	for _, b := range us.backends {
		switch b {
		case BackendInternal:
			u, err = us.authInternal(name, password, remote)
			internalErr = err
		case BackendOAuth2:
			u, err = us.authToken(password)
			tokenErr = err
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		// The most telling refusal: the loopback rule (the password was
		// right), a token's reason when the password looks like a JWT,
		// else bad credentials.
		switch {
		case errors.Is(internalErr, ErrLoopbackOnly):
			err = internalErr
		case tokenErr != nil && looksLikeJWT(password):
			err = tokenErr
		default:
			err = ErrBadCredentials
		}
		if us.limit != nil && us.limit.fail(key) {
			us.log.Warn("login rate limit: blocking source address", "remote", addrString(remote), "backoff", us.limit.backoff)
		}
		us.authFailed(name, remote, err, AuditAuthFailure)
		return nil, err
	}
	us.authSucceeded(name, u, remote)
	return u, nil
}

// authInternal checks name and password against the user database.
func (us *Users) authInternal(name, password string, remote net.Addr) (*User, error) {
	u := us.snap.Load().users[name]
	h := dummyHash
	if u != nil && u.hash != nil {
		h = u.hash
	}
	switch {
	case !checkPassword(h, password) || u == nil || u.hash == nil:
		return nil, ErrBadCredentials
	case us.loopback[name] && !isLoopback(remote):
		return nil, ErrLoopbackOnly
	}
	return u, nil
}

func (us *Users) authFailed(name string, remote net.Addr, err error, event string, extra ...any) {
	if r := TokenReason(err); r != "" {
		extra = append(extra, "backend", BackendOAuth2, "token_error", r)
	}
	us.log.Warn("authentication failed", append([]any{"user", name, "remote", addrString(remote), "err", err}, extra...)...)
	if ev := us.eventsOn(); ev != nil {
		ev.EmitKV("user.authentication.failure", "name", name, "peer_host", peerHost(remote), "error", err.Error())
	}
	if us.audit != nil {
		us.audit.Info(event, append([]any{"user", name, "remote", addrString(remote), "reason", err.Error()}, extra...)...)
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// isLoopback reports whether remote is a loopback IP address or a Unix
// socket. A nil or unparsable address is not loopback.
func isLoopback(remote net.Addr) bool {
	switch a := remote.(type) {
	case nil:
		return false
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UDPAddr:
		return a.IP.IsLoopback()
	case *net.IPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	ap, err := netip.ParseAddrPort(remote.String())
	if err != nil {
		return false
	}
	return ap.Addr().Unmap().IsLoopback()
}

// Lookup returns the user named name (for SASL EXTERNAL and the HTTP API).
func (us *Users) Lookup(name string) (*User, bool) {
	u, ok := us.snap.Load().users[name]
	return u, ok
}

// CanAccessVHost reports whether u has a permission record in vhost, which
// is what RabbitMQ requires for connection.open.
func (us *Users) CanAccessVHost(u *User, vhost string) bool {
	if u != nil && u.token != nil {
		return us.tokenVHostAccess(u, vhost)
	}
	return u != nil && us.snap.Load().perm(u.name, vhost) != nil
}

// CheckVHost is CanAccessVHost returning an *AccessError with RabbitMQ's
// text ("access to vhost '/x' refused for user 'bob'").
func (us *Users) CheckVHost(u *User, vhost string) error {
	if us.CanAccessVHost(u, vhost) {
		return nil
	}
	return us.denied(u, &AccessError{User: userName(u), VHost: vhost})
}

// Check returns nil if u's permission in vhost allows perm on the resource
// of the given kind ("queue", "exchange", ...) and name, else an
// *AccessError (errors.Is ErrAccessRefused) with RabbitMQ's text, e.g.
// "configure access to queue 'q' in vhost '/' refused for user 'bob'".
// The default exchange (kind "exchange", name "") is checked as
// "amq.default". Check reads the current permissions, not those at
// authentication time.
func (us *Users) Check(u *User, vhost string, perm Perm, kind, name string) error {
	if kind == "exchange" && name == "" {
		name = DefaultExchangeName
	}
	if u != nil && u.token != nil {
		if us.tokenResourceAccess(u, vhost, perm, name) {
			return nil
		}
	} else if u != nil {
		if p := us.snap.Load().perm(u.name, vhost); p != nil && p.allows(perm, name) {
			return nil
		}
	}
	return us.denied(u, &AccessError{User: userName(u), VHost: vhost, Perm: perm, Kind: kind, Name: name})
}

func userName(u *User) string {
	if u == nil {
		return ""
	}
	return u.name
}

// Permissions returns user's permission record in vhost.
func (us *Users) Permissions(user, vhost string) (Permission, bool) {
	p := us.snap.Load().perm(user, vhost)
	if p == nil {
		return Permission{}, false
	}
	return p.Permission, true
}

// ListUsers returns all users sorted by name.
func (us *Users) ListUsers() []*User {
	s := us.snap.Load()
	out := make([]*User, 0, len(s.users))
	for _, u := range s.users {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b *User) int { return strings.Compare(a.name, b.name) })
	return out
}

// ListPermissions returns all permission records sorted by vhost, then user.
func (us *Users) ListPermissions() []Permission {
	s := us.snap.Load()
	var out []Permission
	for _, m := range s.perms {
		for _, p := range m {
			out = append(out, p.Permission)
		}
	}
	slices.SortFunc(out, func(a, b Permission) int {
		if c := strings.Compare(a.VHost, b.VHost); c != 0 {
			return c
		}
		return strings.Compare(a.User, b.User)
	})
	return out
}

func validName(s string) bool { return s != "" && utf8.ValidString(s) }

func userKey(name string) string { return userPrefix + url.PathEscape(name) }

func permKey(vhost, user string) string {
	return permPrefix + url.PathEscape(vhost) + "/" + url.PathEscape(user)
}

// normalizeTags trims tags and drops empty and duplicate ones, keeping order.
func normalizeTags(tags []string) []string {
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		if t = strings.TrimSpace(t); t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// PutUser creates or replaces user name with a new sha256-salted hash of
// password and the given tags; its permissions are kept. An empty password
// makes a user that cannot authenticate by password.
func (us *Users) PutUser(name, password string, tags []string) error {
	return us.Apply(PutUserCommand(name, password, tags))
}

// PutUserHash is PutUser with a password hash as RabbitMQ exports it
// (base64 of a 4-byte salt and a SHA-256 or SHA-512 digest, the algorithm
// told by the length), for importing definitions. "" means no password.
func (us *Users) PutUserHash(name, hash string, tags []string) error {
	return us.Apply(Command{Op: OpPutUser, User: name, PasswordHash: hash, Tags: tags})
}

// DeleteUser deletes user name and all its permissions. Permissions are
// deleted first, so an interruption never leaves permissions that a later
// user of the same name would inherit.
func (us *Users) DeleteUser(name string) error {
	return us.Apply(Command{Op: OpDeleteUser, User: name})
}

// SetPermissions sets user's configure, write and read expressions in
// vhost (RE2 syntax, unanchored; "" matches nothing, ".*" everything). The
// user must exist; the vhost's existence is the caller's to check.
func (us *Users) SetPermissions(user, vhost, configure, write, read string) error {
	return us.Apply(Command{Op: OpSetPermissions, User: user, VHost: vhost, Configure: configure, Write: write, Read: read})
}

// ClearPermissions removes user's permissions in vhost; it is a no-op if
// there are none.
func (us *Users) ClearPermissions(user, vhost string) error {
	return us.Apply(Command{Op: OpClearPermissions, User: user, VHost: vhost})
}

// ClearVHost removes every user's permissions in vhost (call it when the
// vhost is deleted).
func (us *Users) ClearVHost(vhost string) error {
	return us.Apply(Command{Op: OpClearVHost, VHost: vhost})
}
