package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Users, permissions and topic permissions change by typed commands
// (issue 43, item 1), as the core's topology does (exchange.TopologyCommand):
//
//   - Users.Apply is the one path by which the database changes. PutUser,
//     DeleteUser, SetPermissions and the others build a Command and apply
//     it; Users.Do first checks that the acting user may manage users
//     (the one check, on the command).
//   - Standalone, Apply changes the snapshot and writes the command's
//     records in one store batch (metaBatcher) before it returns.
//   - In a cluster that runs commands (Proposer.UserCommands: the
//     metadata group's topology_commands flag is enabled), Apply checks
//     the command against this node's snapshot, then proposes it
//     (EncodeCommand); the metadata group's FSM calls ApplyCommitted on
//     every node, this one included, which changes memory and returns the
//     records for the FSM to write to the node's own store. Until the flag
//     is enabled (a node of v0.1.0 is a member), the records are written
//     through the Store, which replicates them, and ApplyMeta (cluster.go)
//     reloads from them: the reader of that older format.

// Op is what a Command does. The numbers are part of the encoding: never
// reuse one.
type Op uint8

// Command operations.
const (
	OpPutUser               Op = 1 // User, PasswordHash, HashingAlgorithm, Tags
	OpDeleteUser            Op = 2 // User, with every permission of it
	OpSetPermissions        Op = 3 // User, VHost, Configure, Write, Read
	OpClearPermissions      Op = 4 // User, VHost
	OpSetTopicPermissions   Op = 5 // User, VHost, Exchange, Write, Read
	OpClearTopicPermissions Op = 6 // User, VHost, Exchange ("" every exchange)
	OpClearVHost            Op = 7 // VHost: every user's permissions in it
)

var opNames = map[Op]string{
	OpPutUser:               "user.put",
	OpDeleteUser:            "user.delete",
	OpSetPermissions:        "permission.set",
	OpClearPermissions:      "permission.clear",
	OpSetTopicPermissions:   "topic-permission.set",
	OpClearTopicPermissions: "topic-permission.clear",
	OpClearVHost:            "permission.clear-vhost",
}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("users-op-%d", uint8(o))
}

// Command is one change of the user database. Actor is the user it acts
// for ("" for the broker itself: its default user, a definitions import):
// recorded, checked by Do before Apply.
type Command struct {
	Op    Op
	Actor string

	User         string
	VHost        string
	Exchange     string
	PasswordHash string // as RabbitMQ exports it (the algorithm told by its length); "" for no password
	Tags         []string
	Configure    string
	Write        string
	Read         string
}

// commandVersion is the first byte of an encoded Command.
const commandVersion = 1

// ErrBadCommand is an encoded Command that does not decode.
var ErrBadCommand = errors.New("auth: bad users command")

// unreadableError is an encoded Command of a version, an operation or a
// field this release does not know (a newer release wrote it). Its
// Unreadable method lets a reader that does not import auth (the
// metadata group's FSM) tell it from a bad entry: it stops applying
// rather than skip it.
type unreadableError struct{ what string }

func (e *unreadableError) Error() string {
	return "auth: users command of a newer format: " + e.what
}

// Unreadable reports that a newer release wrote the command.
func (*unreadableError) Unreadable() bool { return true }

// IsUnreadable reports whether err is a command of a newer format.
func IsUnreadable(err error) bool {
	var u *unreadableError
	return errors.As(err, &u)
}

// wireCommand is a Command's encoded form (JSON, as auth's records).
type wireCommand struct {
	Op           Op       `json:"op"`
	Actor        string   `json:"actor,omitempty"`
	User         string   `json:"user,omitempty"`
	VHost        string   `json:"vhost,omitempty"`
	Exchange     string   `json:"exchange,omitempty"`
	PasswordHash string   `json:"password_hash,omitempty"`
	Tags         []string `json:"tags"`
	Configure    string   `json:"configure"`
	Write        string   `json:"write"`
	Read         string   `json:"read"`
}

// EncodeCommand encodes c: version 1 | JSON object.
func EncodeCommand(c Command) []byte {
	b, _ := json.Marshal(wireCommand(c)) // plain strings: cannot fail
	return append([]byte{commandVersion}, b...)
}

// DecodeCommand decodes what EncodeCommand made. A version, an op or a
// field it does not know is an unreadable command (IsUnreadable); bytes
// that do not decode are ErrBadCommand.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) < 1 {
		return Command{}, fmt.Errorf("%w: empty", ErrBadCommand)
	}
	if b[0] != commandVersion {
		if b[0] > commandVersion {
			return Command{}, &unreadableError{fmt.Sprintf("version %d", b[0])}
		}
		return Command{}, fmt.Errorf("%w: version %d", ErrBadCommand, b[0])
	}
	dec := json.NewDecoder(bytes.NewReader(b[1:]))
	dec.DisallowUnknownFields()
	var w wireCommand
	if err := dec.Decode(&w); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return Command{}, &unreadableError{err.Error()}
		}
		return Command{}, fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	if dec.More() {
		return Command{}, fmt.Errorf("%w: trailing data", ErrBadCommand)
	}
	if _, ok := opNames[w.Op]; !ok {
		return Command{}, &unreadableError{fmt.Sprintf("operation %d", w.Op)}
	}
	return Command(w), nil
}

// Proposer replicates users commands: the cluster's metadata group.
type Proposer interface {
	// UserCommands reports whether commands are proposed: every member
	// reads them (the feature flag is enabled).
	UserCommands() bool
	// ProposeUsers replicates an encoded command and returns once it is
	// committed and applied on this node (ApplyCommitted), or with an
	// error (which may leave it committed: a timeout does not cancel it).
	ProposeUsers(cmd []byte) error
}

type proposerBox struct{ p Proposer }

// SetProposer makes Apply propose its commands through p once p says the
// cluster runs them. Call it once the metadata group is started.
func (us *Users) SetProposer(p Proposer) { us.proposer.Store(&proposerBox{p}) }

func (us *Users) commandsOn() Proposer {
	box := us.proposer.Load()
	if box == nil || box.p == nil || !box.p.UserCommands() {
		return nil
	}
	return box.p
}

// metaBatcher is a Store that writes several records in one durable batch
// (keys[i] gets vals[i], or is deleted when vals[i] is nil).
type metaBatcher interface {
	WriteMetaBatch(keys []string, vals [][]byte) error
}

// Record is a record a command writes (Val) or deletes (Val nil) in the
// node's store.
type Record struct {
	Key string
	Val []byte
}

// Do applies c for actor: the one check of the user database's changes.
// Managing users and permissions needs the administrator tag (as
// RabbitMQ's management API); an Unrestricted actor is the broker's own
// work. The actor's name is recorded on the command.
func (us *Users) Do(a Actor, c Command) error {
	if !a.Unrestricted && (a.User == nil || !a.User.HasTag("administrator")) {
		return fmt.Errorf("%w: user '%s' may not change users or permissions (%v): the administrator tag is needed",
			ErrAccessRefused, a.Name(), c.Op)
	}
	c.Actor = a.Name()
	return us.Apply(c)
}

// Apply applies c: the one path by which users, permissions and topic
// permissions change. It returns once the change is in memory and its
// records are durable (in a cluster: committed and applied here).
func (us *Users) Apply(c Command) error {
	us.wmu.Lock()
	defer us.wmu.Unlock()
	if p := us.commandsOn(); p != nil {
		cur := us.snap.Load()
		s := cur.clone()
		if _, err := applyTo(s, c, false); err != nil {
			return err
		}
		if err := p.ProposeUsers(EncodeCommand(c)); err != nil {
			return fmt.Errorf("auth: cluster: %w", err)
		}
		us.emit(cur, c)
		return nil
	}
	us.mu.Lock()
	defer us.mu.Unlock()
	cur := us.snap.Load()
	s := cur.clone()
	recs, err := applyTo(s, c, false)
	if err != nil {
		return err
	}
	n, werr := us.write(recs)
	if werr != nil {
		if n > 0 {
			// Some records are written (a store without batches): publish
			// what the store holds now.
			if rs, _, lerr := loadSnapshot(us.st); lerr == nil {
				us.snap.Store(rs)
			}
		}
		return werr
	}
	us.snap.Store(s)
	us.emit(cur, c)
	return nil
}

// ApplyCommitted applies a command the cluster's metadata group committed:
// every node calls it for every such command, in log order, the proposer
// included. Memory changes here; the records the change makes or removes
// are returned, for the caller (the group's FSM) to write to this node's
// own store. It decides from the replicated database only, which every
// node holds alike at the command's index: a command whose user is gone
// since it was proposed changes nothing. Applying a command twice (a
// replay after a crash) changes nothing more.
func (us *Users) ApplyCommitted(c Command) ([]Record, error) {
	// A writer of the records path (the flag was enabled while it
	// proposed its record) may hold mu waiting for its entry, which
	// comes after this one: never wait for mu. Without it, the new
	// snapshot is swapped in alone, and a reload once the writer is done
	// makes sure its swap did not hide this change (reloadLater).
	locked := us.mu.TryLock()
	if locked {
		defer us.mu.Unlock()
	}
	for {
		cur := us.snap.Load()
		s := cur.clone()
		recs, err := applyTo(s, c, true)
		if err != nil {
			return nil, err
		}
		if us.snap.CompareAndSwap(cur, s) {
			if !locked {
				us.reloadLater()
			}
			return recs, nil
		}
	}
}

// ApplyCommittedEntry is ApplyCommitted of an encoded command.
func (us *Users) ApplyCommittedEntry(b []byte) ([]Record, error) {
	c, err := DecodeCommand(b)
	if err != nil {
		return nil, err
	}
	return us.ApplyCommitted(c)
}

// write writes recs: in a cluster through the Replicator (one proposal,
// all or none), else to the store, in one batch where the store has them,
// else one by one in order (then n tells how many were written before an
// error).
func (us *Users) write(recs []Record) (n int, err error) {
	if len(recs) == 0 {
		return 0, nil
	}
	if us.repl != nil {
		keys := make([]string, len(recs))
		vals := make([][]byte, len(recs))
		for i, r := range recs {
			keys[i], vals[i] = r.Key, r.Val
		}
		if err := us.repl.ReplicateMeta(keys, vals); err != nil {
			return 0, fmt.Errorf("auth: cluster: %w", err)
		}
		return len(recs), nil
	}
	if bs, ok := us.st.(metaBatcher); ok {
		keys := make([]string, len(recs))
		vals := make([][]byte, len(recs))
		for i, r := range recs {
			keys[i], vals[i] = r.Key, r.Val
		}
		if err := bs.WriteMetaBatch(keys, vals); err != nil {
			return 0, fmt.Errorf("auth: store: %w", err)
		}
		return len(recs), nil
	}
	for i, r := range recs {
		if r.Val == nil {
			err = us.st.DeleteMeta(r.Key)
		} else {
			err = us.st.PutMeta(r.Key, r.Val)
		}
		if err != nil {
			return i, fmt.Errorf("auth: store %s: %w", r.Key, err)
		}
	}
	return len(recs), nil
}

// emit sends the events of c, applied over cur.
func (us *Users) emit(cur *snapshot, c Command) {
	ev := us.eventsOn()
	if ev == nil {
		return
	}
	switch c.Op {
	case OpPutUser:
		if cur.users[c.User] == nil {
			ev.EmitKV("user.created", "name", c.User, "tags", strings.Join(normalizeTags(c.Tags), ","))
		}
	case OpDeleteUser:
		ev.EmitKV("user.deleted", "name", c.User)
	case OpSetPermissions:
		ev.EmitKV("permission.created", "user", c.User, "vhost", c.VHost, "configure", c.Configure, "write", c.Write, "read", c.Read)
	case OpClearPermissions:
		if cur.perm(c.User, c.VHost) != nil {
			ev.EmitKV("permission.deleted", "user", c.User, "vhost", c.VHost)
		}
	}
}

// applyTo applies c to s (a clone) and returns the records it writes and
// deletes, in an order that never leaves permissions of a deleted user
// behind if written one by one. committed: c was checked by its proposer
// and committed; what no longer applies (its user is gone) is a no-op,
// not an error.
func applyTo(s *snapshot, c Command, committed bool) ([]Record, error) {
	noUser := func() ([]Record, error) {
		if committed {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: %q", ErrNoSuchUser, c.User)
	}
	switch c.Op {
	case OpPutUser:
		if !validName(c.User) {
			return nil, ErrBadName
		}
		h, alg, err := decodeHash(c.PasswordHash)
		if err != nil {
			return nil, err
		}
		if h == nil {
			alg = HashSHA256
		}
		u := &User{name: c.User, tags: normalizeTags(c.Tags), hash: h, alg: alg}
		val, err := json.Marshal(userRecord{Name: c.User, PasswordHash: u.PasswordHash(), HashingAlgorithm: alg, Tags: u.tags})
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		s.users[c.User] = u
		return []Record{{Key: userKey(c.User), Val: val}}, nil
	case OpDeleteUser:
		if s.users[c.User] == nil {
			return noUser()
		}
		recs := dropTopicPerms(s, c.User, "", "")
		for _, vhost := range slices.Sorted(maps.Keys(s.perms[c.User])) {
			recs = append(recs, Record{Key: permKey(vhost, c.User)})
			s.withPerm(c.User, vhost, nil)
		}
		delete(s.users, c.User)
		return append(recs, Record{Key: userKey(c.User)}), nil
	case OpSetPermissions:
		if !validName(c.VHost) {
			return nil, ErrBadName
		}
		p, err := compilePermission(Permission{User: c.User, VHost: c.VHost, Configure: c.Configure, Write: c.Write, Read: c.Read})
		if err != nil {
			return nil, err
		}
		if s.users[c.User] == nil {
			return noUser()
		}
		val, err := json.Marshal(p.Permission)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		s.withPerm(c.User, c.VHost, p)
		return []Record{{Key: permKey(c.VHost, c.User), Val: val}}, nil
	case OpClearPermissions:
		if s.perm(c.User, c.VHost) == nil {
			return nil, nil
		}
		s.withPerm(c.User, c.VHost, nil)
		return []Record{{Key: permKey(c.VHost, c.User)}}, nil
	case OpSetTopicPermissions:
		if !validName(c.VHost) || !validName(c.Exchange) {
			return nil, ErrBadName
		}
		p, err := compileTopicPermission(TopicPermission{User: c.User, VHost: c.VHost, Exchange: c.Exchange, Write: c.Write, Read: c.Read})
		if err != nil {
			return nil, err
		}
		if s.users[c.User] == nil {
			return noUser()
		}
		val, err := json.Marshal(p.TopicPermission)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		s.withTopicPerm(c.User, c.VHost, c.Exchange, p)
		return []Record{{Key: topicPermKey(c.VHost, c.User, c.Exchange), Val: val}}, nil
	case OpClearTopicPermissions:
		if c.User == "" || c.VHost == "" {
			return nil, nil
		}
		return dropTopicPerms(s, c.User, c.VHost, c.Exchange), nil
	case OpClearVHost:
		if c.VHost == "" {
			return nil, nil
		}
		recs := dropTopicPerms(s, "", c.VHost, "")
		for _, user := range slices.Sorted(maps.Keys(s.perms)) {
			if s.perms[user][c.VHost] != nil {
				recs = append(recs, Record{Key: permKey(c.VHost, user)})
				s.withPerm(user, c.VHost, nil)
			}
		}
		return recs, nil
	}
	return nil, &unreadableError{fmt.Sprintf("operation %d", c.Op)}
}

// dropTopicPerms removes from s the topic permissions of user (every
// user when ""), in vhost (every vhost when ""), for exchange (every
// exchange when ""), and returns their deletes.
func dropTopicPerms(s *snapshot, user, vhost, exchange string) []Record {
	var recs []Record
	for _, u := range slices.Sorted(maps.Keys(s.tperms)) {
		if user != "" && u != user {
			continue
		}
		vm := s.tperms[u]
		for _, vh := range slices.Sorted(maps.Keys(vm)) {
			if vhost != "" && vh != vhost {
				continue
			}
			for _, ex := range slices.Sorted(maps.Keys(vm[vh])) {
				if exchange != "" && ex != exchange {
					continue
				}
				recs = append(recs, Record{Key: topicPermKey(vh, u, ex)})
				s.withTopicPerm(u, vh, ex, nil)
			}
		}
	}
	return recs
}

// PutUserCommand is the command that creates or replaces user name with a
// new sha256-salted hash of password ("" for no password) and tags: the
// hash is made here, once, so that every node of a cluster stores the
// same one.
func PutUserCommand(name, password string, tags []string) Command {
	c := Command{Op: OpPutUser, User: name, Tags: tags}
	if password != "" {
		c.PasswordHash = base64.StdEncoding.EncodeToString(hashPassword(password))
	}
	return c
}
