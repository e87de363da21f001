package auth

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// TopicPermission is a user's topic permission record for one exchange in a
// vhost (RabbitMQ's topic permissions, shaped as in definitions.json). Write
// is matched against the routing key of a publish to the exchange, Read
// against the binding key of a binding from it (a queue.bind, an MQTT
// subscription, a STOMP subscription). They apply to topic exchanges only.
//
// As in RabbitMQ: a user without a topic permission record for an exchange
// may use every routing key on it; the expressions are unanchored; the
// empty expression matches only the empty routing key; "{username}",
// "{vhost}" and (MQTT only) "{client_id}" are replaced by the connection's
// values before matching. Unlike RabbitMQ, the values are regexp-quoted,
// so a user named "a.b" does not also match "aXb".
type TopicPermission struct {
	User     string `json:"user"`
	VHost    string `json:"vhost"`
	Exchange string `json:"exchange"`
	Write    string `json:"write"`
	Read     string `json:"read"`
}

const (
	topicPermPrefix = "tperm/"
	varClientID     = "{client_id}"
)

// topicPermission is a TopicPermission with its expressions compiled.
type topicPermission struct {
	TopicPermission
	m [2]topicMatcher // 0 write, 1 read
}

// topicMatcher is an expression with {username} and {vhost} expanded. If
// it uses {client_id} it is kept as a template (tmpl) and compiled per
// connection, else compiled once.
type topicMatcher struct {
	matcher
	tmpl string
}

func topicIndex(p Perm) int {
	switch p {
	case Write:
		return 0
	case Read:
		return 1
	}
	return -1
}

func expandTopicExpr(expr string, vars ...string) string {
	if expr == "" {
		return "^$"
	}
	if !strings.Contains(expr, "{") {
		return expr
	}
	for i := 0; i+1 < len(vars); i += 2 {
		expr = strings.ReplaceAll(expr, vars[i], regexp.QuoteMeta(vars[i+1]))
	}
	return expr
}

func compileTopicPermission(p TopicPermission) (*topicPermission, error) {
	tp := &topicPermission{TopicPermission: p}
	for i, expr := range [2]string{p.Write, p.Read} {
		e := expandTopicExpr(expr, "{username}", p.User, "{vhost}", p.VHost)
		if strings.Contains(e, varClientID) {
			if _, err := regexp.Compile(strings.ReplaceAll(e, varClientID, "x")); err != nil {
				return nil, fmt.Errorf("%w: topic %s %q: %v", ErrBadRegex, [2]Perm{Write, Read}[i], expr, err)
			}
			tp.m[i] = topicMatcher{tmpl: e}
			continue
		}
		m, err := compileMatcher(e)
		if err != nil {
			return nil, fmt.Errorf("%w: topic %s %q: %v", ErrBadRegex, [2]Perm{Write, Read}[i], expr, err)
		}
		tp.m[i] = topicMatcher{matcher: m}
	}
	return tp, nil
}

func topicPermKey(vhost, user, exchange string) string {
	return topicPermPrefix + url.PathEscape(vhost) + "/" + url.PathEscape(user) + "/" + url.PathEscape(exchange)
}

// withTopicPerm sets (p != nil) or removes (p == nil) user's topic
// permission for exchange in vhost on a cloned snapshot.
func (s *snapshot) withTopicPerm(user, vhost, exchange string, p *topicPermission) {
	vm := make(map[string]map[string]*topicPermission, len(s.tperms[user])+1)
	for k, v := range s.tperms[user] {
		vm[k] = v
	}
	em := make(map[string]*topicPermission, len(vm[vhost])+1)
	for k, v := range vm[vhost] {
		em[k] = v
	}
	if p == nil {
		delete(em, exchange)
	} else {
		em[exchange] = p
	}
	if len(em) == 0 {
		delete(vm, vhost)
	} else {
		vm[vhost] = em
	}
	if len(vm) == 0 {
		delete(s.tperms, user)
	} else {
		s.tperms[user] = vm
	}
}

// loadTopicPerms reads the topic permission records into s; records of
// users that do not exist are returned as orphans.
func loadTopicPerms(st Store, s *snapshot) (orphans []string, err error) {
	err = st.LoadMeta(topicPermPrefix, func(key string, val []byte) error {
		var p TopicPermission
		if err := json.Unmarshal(val, &p); err != nil {
			return fmt.Errorf("auth: load %s: %w", key, err)
		}
		if s.users[p.User] == nil {
			orphans = append(orphans, key)
			return nil
		}
		c := Command{Op: OpSetTopicPermissions, User: p.User, VHost: p.VHost, Exchange: p.Exchange, Write: p.Write, Read: p.Read}
		if _, err := applyTo(s, c, true); err != nil {
			return fmt.Errorf("auth: load %s: %w", key, err)
		}
		return nil
	})
	return orphans, err
}

// SetTopicPermissions sets user's topic permission for exchange in vhost
// (RE2 syntax, unanchored; "" matches only the empty routing key). The user
// must exist.
func (us *Users) SetTopicPermissions(user, vhost, exchange, write, read string) error {
	return us.Apply(Command{Op: OpSetTopicPermissions, User: user, VHost: vhost, Exchange: exchange, Write: write, Read: read})
}

// ClearTopicPermissions removes user's topic permission for exchange in
// vhost, or all of user's topic permissions in vhost when exchange is "".
// It is a no-op if there are none.
func (us *Users) ClearTopicPermissions(user, vhost, exchange string) error {
	return us.Apply(Command{Op: OpClearTopicPermissions, User: user, VHost: vhost, Exchange: exchange})
}

// TopicPermissions returns user's topic permission records in vhost (all
// vhosts when vhost is ""), sorted by vhost, then exchange.
func (us *Users) TopicPermissions(user, vhost string) []TopicPermission {
	var out []TopicPermission
	for vh, em := range us.snap.Load().tperms[user] {
		if vhost != "" && vh != vhost {
			continue
		}
		for _, p := range em {
			out = append(out, p.TopicPermission)
		}
	}
	sortTopicPerms(out)
	return out
}

// ListTopicPermissions returns all topic permission records sorted by
// vhost, user, exchange.
func (us *Users) ListTopicPermissions() []TopicPermission {
	var out []TopicPermission
	for _, vm := range us.snap.Load().tperms {
		for _, em := range vm {
			for _, p := range em {
				out = append(out, p.TopicPermission)
			}
		}
	}
	sortTopicPerms(out)
	return out
}

func sortTopicPerms(ps []TopicPermission) {
	slices.SortFunc(ps, func(a, b TopicPermission) int {
		if c := strings.Compare(a.VHost, b.VHost); c != 0 {
			return c
		}
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Exchange, b.Exchange)
	})
}

// CheckTopic returns nil if u may use routingKey on the topic exchange
// exchange in vhost for perm (Write: publish; Read: bind or subscribe),
// else an *AccessError with RabbitMQ's text ("write access to topic 'a.b'
// in exchange 'amq.topic' in vhost '/' refused for user 'bob'"). The
// caller checks that the exchange is a topic exchange. clientID is the
// value of {client_id} (MQTT), "" elsewhere. CheckTopic compiles
// expressions that use {client_id} on every call; connections use a
// TopicCache instead.
func (us *Users) CheckTopic(u *User, vhost string, perm Perm, exchange, routingKey, clientID string) error {
	var c TopicCache
	c.ClientID = clientID
	return c.Check(us, u, vhost, perm, exchange, routingKey)
}

// maxTopicCache bounds the decisions a TopicCache remembers.
const maxTopicCache = 4096

// TopicCache remembers CheckTopic's decisions for one connection or
// channel, so that a publish costs a map lookup, not a regexp match. It
// forgets everything when any user or permission changes. The zero value
// is ready to use; it is not safe for concurrent use.
type TopicCache struct {
	// ClientID is the value of {client_id} (MQTT). Set it before the first
	// check.
	ClientID string

	snap *snapshot
	res  map[topicCacheKey]bool
	re   map[string]matcher // {client_id} templates compiled
}

type topicCacheKey struct {
	perm          Perm
	exchange, key string
}

// Check is CheckTopic through the cache.
func (c *TopicCache) Check(us *Users, u *User, vhost string, perm Perm, exchange, routingKey string) error {
	s := us.snap.Load()
	if u == nil {
		return &AccessError{VHost: vhost, Perm: perm, Kind: "topic", Name: exchange, Topic: routingKey}
	}
	if u.token != nil {
		if us.tokenTopicAccess(u, vhost, perm, exchange, routingKey) {
			return nil
		}
		return us.denied(u, &AccessError{User: u.name, VHost: vhost, Perm: perm, Kind: "topic", Name: exchange, Topic: routingKey})
	}
	em := s.tperms[u.name][vhost]
	if em == nil {
		return nil // the common case: no topic permissions at all
	}
	if c.snap != s {
		c.snap, c.res = s, nil
	}
	k := topicCacheKey{perm, exchange, routingKey}
	ok, seen := c.res[k]
	if !seen {
		ok = c.allows(em[exchange], perm, routingKey)
		if c.res == nil || len(c.res) >= maxTopicCache {
			c.res = make(map[topicCacheKey]bool)
		}
		c.res[k] = ok
	}
	if ok {
		return nil
	}
	return us.denied(u, &AccessError{User: u.name, VHost: vhost, Perm: perm, Kind: "topic", Name: exchange, Topic: routingKey})
}

func (c *TopicCache) allows(p *topicPermission, perm Perm, key string) bool {
	if p == nil {
		return true // no record for this exchange: everything is allowed
	}
	i := topicIndex(perm)
	if i < 0 {
		return false
	}
	tm := p.m[i]
	if tm.tmpl == "" {
		return tm.match(key)
	}
	m, ok := c.re[tm.tmpl]
	if !ok {
		var err error
		m, err = compileMatcher(strings.ReplaceAll(tm.tmpl, varClientID, regexp.QuoteMeta(c.ClientID)))
		if err != nil {
			m = matcher{} // cannot happen: checked with a stand-in when set
		}
		if c.re == nil {
			c.re = map[string]matcher{}
		}
		c.re[tm.tmpl] = m
	}
	return m.match(key)
}

// HasTopicPermissions reports whether u has any topic permission record in
// vhost, so front ends can skip looking up the exchange's type otherwise.
// A token user always has: its topic access comes from its scopes.
func (us *Users) HasTopicPermissions(u *User, vhost string) bool {
	if u != nil && u.token != nil {
		return true
	}
	return u != nil && us.snap.Load().tperms[u.name][vhost] != nil
}
