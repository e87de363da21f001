package auth

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
)

// memStore is an in-memory Store. failPut/failDelete make writes fail.
type memStore struct {
	mu         sync.Mutex
	m          map[string][]byte
	failPut    error
	failDelete error
}

func newMemStore() *memStore { return &memStore{m: map[string][]byte{}} }

func (s *memStore) PutMeta(key string, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPut != nil {
		return s.failPut
	}
	s.m[key] = append([]byte(nil), val...)
	return nil
}

func (s *memStore) DeleteMeta(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failDelete != nil {
		return s.failDelete
	}
	delete(s.m, key)
	return nil
}

func (s *memStore) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	s.mu.Lock()
	var keys []string
	for k := range s.m {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = s.m[k]
	}
	s.mu.Unlock()
	for i, k := range keys {
		if err := fn(k, vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var (
	local  = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	local6 = &net.TCPAddr{IP: net.IPv6loopback, Port: 40000}
	remote = &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40000}
)

func defaultOpts() Options {
	return Options{DefaultUser: "guest", DefaultPass: "guest", DefaultVHost: "/", LoopbackUsers: []string{"guest"}}
}

func mustNew(t testing.TB, st Store, opts Options) *Users {
	t.Helper()
	us, err := New(st, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return us
}

// rabbitHash builds a hash the way RabbitMQ does, with a fixed salt.
func rabbitHash(alg string, salt []byte, password string) string {
	var sum []byte
	switch alg {
	case HashSHA256:
		s := sha256.Sum256(append(append([]byte{}, salt...), password...))
		sum = s[:]
	case HashSHA512:
		s := sha512.Sum512(append(append([]byte{}, salt...), password...))
		sum = s[:]
	}
	return base64.StdEncoding.EncodeToString(append(append([]byte{}, salt...), sum...))
}

func TestDefaultUser(t *testing.T) {
	st := newMemStore()
	us := mustNew(t, st, defaultOpts())
	u, err := us.Authenticate("guest", "guest", local)
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if u.Name() != "guest" || !reflect.DeepEqual(u.Tags(), []string{"administrator"}) || !u.HasTag("administrator") {
		t.Fatalf("user = %q tags %q", u.Name(), u.Tags())
	}
	if !us.CanAccessVHost(u, "/") || us.CanAccessVHost(u, "other") {
		t.Fatal("default user should access / only")
	}
	if err := us.Check(u, "/", Configure, "queue", "anything"); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if got, want := st.keys(), []string{"perm/%2F/guest", "user/guest"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("store keys = %q, want %q", got, want)
	}

	// Existing users: the default user is not recreated.
	if err := us.PutUser("admin", "pw", nil); err != nil {
		t.Fatal(err)
	}
	if err := us.DeleteUser("guest"); err != nil {
		t.Fatal(err)
	}
	us2 := mustNew(t, st, defaultOpts())
	if _, ok := us2.Lookup("guest"); ok {
		t.Fatal("guest recreated although users exist")
	}

	// No default user configured.
	us3 := mustNew(t, newMemStore(), Options{})
	if n := len(us3.ListUsers()); n != 0 {
		t.Fatalf("%d users, want none", n)
	}
}

func TestPasswordHashFormat(t *testing.T) {
	us := mustNew(t, newMemStore(), Options{})
	if err := us.PutUser("bob", "secret", []string{"monitoring"}); err != nil {
		t.Fatal(err)
	}
	u, _ := us.Lookup("bob")
	if u.HashingAlgorithm() != HashSHA256 {
		t.Fatalf("alg = %q", u.HashingAlgorithm())
	}
	raw, err := base64.StdEncoding.DecodeString(u.PasswordHash())
	if err != nil || len(raw) != 4+32 {
		t.Fatalf("hash %q: %v, %d bytes", u.PasswordHash(), err, len(raw))
	}
	if want := rabbitHash(HashSHA256, raw[:4], "secret"); u.PasswordHash() != want {
		t.Fatalf("hash = %q, want sha256(salt+password) %q", u.PasswordHash(), want)
	}
	// Two users with the same password get different salts.
	_ = us.PutUser("bob2", "secret", nil)
	u2, _ := us.Lookup("bob2")
	if u2.PasswordHash() == u.PasswordHash() {
		t.Fatal("same hash for two users: salt not random")
	}
}

func TestPutUserHashRoundTrip(t *testing.T) {
	salt := []byte{0xde, 0xad, 0xbe, 0xef}
	tests := []struct {
		alg, hash string
	}{
		{HashSHA256, rabbitHash(HashSHA256, salt, "p4ss")},
		{HashSHA512, rabbitHash(HashSHA512, salt, "p4ss")},
	}
	for _, tt := range tests {
		t.Run(tt.alg, func(t *testing.T) {
			st := newMemStore()
			us := mustNew(t, st, Options{})
			if err := us.PutUserHash("imp", tt.hash, []string{"management", "policymaker"}); err != nil {
				t.Fatal(err)
			}
			if _, err := us.Authenticate("imp", "p4ss", remote); err != nil {
				t.Fatalf("Authenticate: %v", err)
			}
			if _, err := us.Authenticate("imp", "p4sS", remote); !errors.Is(err, ErrBadCredentials) {
				t.Fatalf("wrong password: %v", err)
			}
			// Reload from the store: same hash, algorithm and tags.
			u, _ := mustNew(t, st, Options{}).Lookup("imp")
			if u.PasswordHash() != tt.hash || u.HashingAlgorithm() != tt.alg || !reflect.DeepEqual(u.Tags(), []string{"management", "policymaker"}) {
				t.Fatalf("reloaded %q %q %q", u.PasswordHash(), u.HashingAlgorithm(), u.Tags())
			}
		})
	}
	us := mustNew(t, newMemStore(), Options{})
	for _, bad := range []string{"not base64!", base64.StdEncoding.EncodeToString([]byte("short"))} {
		if err := us.PutUserHash("x", bad, nil); !errors.Is(err, ErrBadHash) {
			t.Errorf("PutUserHash(%q) = %v, want ErrBadHash", bad, err)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	us := mustNew(t, newMemStore(), defaultOpts())
	if err := us.PutUser("bob", "secret", nil); err != nil {
		t.Fatal(err)
	}
	if err := us.PutUser("nopass", "", nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, user, pass string
		addr             net.Addr
		want             error
	}{
		{"guest from loopback", "guest", "guest", local, nil},
		{"guest from ipv6 loopback", "guest", "guest", local6, nil},
		{"guest from v4-mapped loopback", "guest", "guest", &net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.1")}, nil},
		{"guest from unix socket", "guest", "guest", &net.UnixAddr{Name: "/tmp/s", Net: "unix"}, nil},
		{"guest from remote", "guest", "guest", remote, ErrLoopbackOnly},
		{"guest from nil addr", "guest", "guest", nil, ErrLoopbackOnly},
		{"guest wrong pass from remote", "guest", "x", remote, ErrBadCredentials},
		{"bob from remote", "bob", "secret", remote, nil},
		{"bob wrong pass", "bob", "Secret", local, ErrBadCredentials},
		{"bob empty pass", "bob", "", local, ErrBadCredentials},
		{"unknown user", "alice", "secret", local, ErrBadCredentials},
		{"passwordless user", "nopass", "", local, ErrBadCredentials},
		{"passwordless user with a password", "nopass", "x", local, ErrBadCredentials},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := us.Authenticate(tt.user, tt.pass, tt.addr)
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if err == nil && u.Name() != tt.user {
				t.Fatalf("user = %q", u.Name())
			}
			if err != nil && !strings.HasPrefix(err.Error(), "auth: ") {
				t.Fatalf("error %q lacks the auth: prefix", err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	us := mustNew(t, newMemStore(), Options{})
	_ = us.PutUser("bob", "pw", nil)
	if err := us.SetPermissions("bob", "/", "^bob-", "^(amq\\.default|out)$", ""); err != nil {
		t.Fatal(err)
	}
	if err := us.SetPermissions("bob", "v2", "", "", "x"); err != nil {
		t.Fatal(err)
	}
	bob, _ := us.Lookup("bob")
	tests := []struct {
		vhost      string
		perm       Perm
		kind, name string
		ok         bool
	}{
		{"/", Configure, "queue", "bob-q", true},
		{"/", Configure, "queue", "q-bob-", false},
		{"/", Configure, "queue", "alice-q", false},
		{"/", Write, "exchange", "", true}, // default exchange as amq.default
		{"/", Write, "exchange", "amq.default", true},
		{"/", Write, "exchange", "out", true},
		{"/", Write, "exchange", "outer", false},
		{"/", Write, "queue", "", false},       // only exchanges get the amq.default name
		{"/", Read, "queue", "bob-q", false},   // "" matches nothing
		{"/", Read, "queue", "", false},        // not even the empty name
		{"v2", Read, "queue", "axb", true},     // unanchored
		{"v2", Configure, "queue", "x", false}, // "" matches nothing
		{"v3", Read, "queue", "x", false},      // no record in vhost
		{"/", Perm(0), "queue", "bob-q", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %s %s %q", tt.vhost, tt.perm, tt.kind, tt.name), func(t *testing.T) {
			err := us.Check(bob, tt.vhost, tt.perm, tt.kind, tt.name)
			if (err == nil) != tt.ok {
				t.Fatalf("Check = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrAccessRefused) {
				t.Fatalf("%v does not wrap ErrAccessRefused", err)
			}
		})
	}

	err := us.Check(bob, "/", Configure, "queue", "q")
	if want := "configure access to queue 'q' in vhost '/' refused for user 'bob'"; err == nil || err.Error() != want {
		t.Fatalf("text = %v, want %q", err, want)
	}
	err = us.Check(bob, "/", Read, "exchange", "")
	if want := "read access to exchange 'amq.default' in vhost '/' refused for user 'bob'"; err == nil || err.Error() != want {
		t.Fatalf("text = %v, want %q", err, want)
	}
	err = us.CheckVHost(bob, "/x")
	if want := "access to vhost '/x' refused for user 'bob'"; err == nil || err.Error() != want || !errors.Is(err, ErrAccessRefused) {
		t.Fatalf("CheckVHost = %v, want %q", err, want)
	}
	if err := us.CheckVHost(bob, "v2"); err != nil {
		t.Fatalf("CheckVHost(v2) = %v", err)
	}
	if err := us.Check(nil, "/", Read, "queue", "q"); !errors.Is(err, ErrAccessRefused) {
		t.Fatalf("nil user: %v", err)
	}
	// Empty expressions everywhere still grant vhost access, as in RabbitMQ.
	_ = us.SetPermissions("bob", "v4", "", "", "")
	if !us.CanAccessVHost(bob, "v4") {
		t.Fatal("record with empty expressions should grant vhost access")
	}
}

func TestChangesApplyToAuthenticatedUser(t *testing.T) {
	us := mustNew(t, newMemStore(), Options{})
	_ = us.PutUser("bob", "pw", nil)
	_ = us.SetPermissions("bob", "/", ".*", ".*", ".*")
	bob, err := us.Authenticate("bob", "pw", remote)
	if err != nil {
		t.Fatal(err)
	}
	if err := us.Check(bob, "/", Read, "queue", "q"); err != nil {
		t.Fatal(err)
	}
	if err := us.SetPermissions("bob", "/", ".*", ".*", "^public$"); err != nil {
		t.Fatal(err)
	}
	if err := us.Check(bob, "/", Read, "queue", "q"); err == nil {
		t.Fatal("narrowed permission not applied")
	}
	if err := us.ClearPermissions("bob", "/"); err != nil {
		t.Fatal(err)
	}
	if us.CanAccessVHost(bob, "/") {
		t.Fatal("cleared permission still grants access")
	}
	if err := us.ClearPermissions("bob", "/"); err != nil {
		t.Fatalf("second ClearPermissions: %v", err)
	}
}

func TestAdminOps(t *testing.T) {
	st := newMemStore()
	us := mustNew(t, st, defaultOpts())
	_ = us.PutUser("bob", "pw", []string{" management ", "management", ""})
	_ = us.PutUser("alice", "pw", nil)
	_ = us.SetPermissions("bob", "/", ".*", "", "")
	_ = us.SetPermissions("bob", "a/b", "", ".*", "")
	_ = us.SetPermissions("alice", "/", "", "", ".*")

	bob, _ := us.Lookup("bob")
	if !reflect.DeepEqual(bob.Tags(), []string{"management"}) {
		t.Fatalf("tags = %q", bob.Tags())
	}
	var names []string
	for _, u := range us.ListUsers() {
		names = append(names, u.Name())
	}
	if !reflect.DeepEqual(names, []string{"alice", "bob", "guest"}) {
		t.Fatalf("ListUsers = %q", names)
	}
	wantPerms := []Permission{
		{"alice", "/", "", "", ".*"},
		{"bob", "/", ".*", "", ""},
		{"guest", "/", ".*", ".*", ".*"},
		{"bob", "a/b", "", ".*", ""},
	}
	if got := us.ListPermissions(); !reflect.DeepEqual(got, wantPerms) {
		t.Fatalf("ListPermissions = %+v", got)
	}
	if p, ok := us.Permissions("bob", "a/b"); !ok || p.Write != ".*" {
		t.Fatalf("Permissions = %+v %v", p, ok)
	}

	// Everything survives a reload.
	us2 := mustNew(t, st, defaultOpts())
	if got := us2.ListPermissions(); !reflect.DeepEqual(got, wantPerms) {
		t.Fatalf("reloaded ListPermissions = %+v", got)
	}
	if _, err := us2.Authenticate("alice", "pw", remote); err != nil {
		t.Fatalf("reloaded Authenticate: %v", err)
	}

	// Replacing a user keeps its permissions.
	if err := us.PutUser("bob", "new", []string{"administrator"}); err != nil {
		t.Fatal(err)
	}
	if _, err := us.Authenticate("bob", "pw", remote); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("old password still works: %v", err)
	}
	bob, err := us.Authenticate("bob", "new", remote)
	if err != nil || !bob.HasTag("administrator") || !us.CanAccessVHost(bob, "a/b") {
		t.Fatalf("replaced user: %v", err)
	}

	// DeleteUser removes the user and its permissions from memory and store.
	if err := us.DeleteUser("bob"); err != nil {
		t.Fatal(err)
	}
	if _, ok := us.Lookup("bob"); ok {
		t.Fatal("bob still there")
	}
	for _, k := range st.keys() {
		if strings.Contains(k, "bob") {
			t.Fatalf("store still holds %s", k)
		}
	}
	if err := us.Check(bob, "/", Configure, "queue", "q"); err == nil {
		t.Fatal("deleted user still allowed")
	}
	if err := us.DeleteUser("bob"); !errors.Is(err, ErrNoSuchUser) {
		t.Fatalf("second DeleteUser = %v", err)
	}

	// ClearVHost.
	if err := us.ClearVHost("/"); err != nil {
		t.Fatal(err)
	}
	if got := us.ListPermissions(); len(got) != 0 {
		t.Fatalf("after ClearVHost: %+v", got)
	}
}

func TestAdminErrors(t *testing.T) {
	st := newMemStore()
	us := mustNew(t, st, Options{})
	_ = us.PutUser("bob", "pw", nil)
	if err := us.SetPermissions("nobody", "/", ".*", ".*", ".*"); !errors.Is(err, ErrNoSuchUser) {
		t.Errorf("unknown user: %v", err)
	}
	if err := us.SetPermissions("bob", "/", "(", ".*", ".*"); !errors.Is(err, ErrBadRegex) || !strings.Contains(err.Error(), "configure") {
		t.Errorf("bad regex: %v", err)
	}
	if err := us.SetPermissions("bob", "", ".*", ".*", ".*"); !errors.Is(err, ErrBadName) {
		t.Errorf("empty vhost: %v", err)
	}
	if err := us.PutUser("", "pw", nil); !errors.Is(err, ErrBadName) {
		t.Errorf("empty name: %v", err)
	}
	if err := us.PutUser("bad\xff", "pw", nil); !errors.Is(err, ErrBadName) {
		t.Errorf("invalid UTF-8 name: %v", err)
	}

	// A failed store write changes nothing in memory.
	boom := errors.New("disk full")
	st.failPut = boom
	if err := us.PutUser("carol", "pw", nil); !errors.Is(err, boom) {
		t.Fatalf("PutUser = %v", err)
	}
	if _, ok := us.Lookup("carol"); ok {
		t.Fatal("carol visible after failed write")
	}
	if err := us.SetPermissions("bob", "/", ".*", ".*", ".*"); !errors.Is(err, boom) {
		t.Fatalf("SetPermissions = %v", err)
	}
	bob, _ := us.Lookup("bob")
	if us.CanAccessVHost(bob, "/") {
		t.Fatal("permission visible after failed write")
	}
	st.failPut = nil
	_ = us.SetPermissions("bob", "/", ".*", ".*", ".*")
	st.failDelete = boom
	if err := us.DeleteUser("bob"); !errors.Is(err, boom) {
		t.Fatalf("DeleteUser = %v", err)
	}
	if _, ok := us.Lookup("bob"); !ok {
		t.Fatal("bob gone after failed delete")
	}
	// A failed default-user creation fails New.
	st2 := newMemStore()
	st2.failPut = boom
	if _, err := New(st2, defaultOpts()); !errors.Is(err, boom) {
		t.Fatalf("New = %v", err)
	}
}

func TestLoadErrorsAndOrphans(t *testing.T) {
	st := newMemStore()
	st.m["user/x"] = []byte("{not json")
	if _, err := New(st, Options{}); err == nil || !strings.Contains(err.Error(), "user/x") {
		t.Fatalf("corrupt user: %v", err)
	}
	st = newMemStore()
	st.m["user/bob"] = []byte(`{"name":"bob","password_hash":"","tags":[]}`)
	st.m["perm/%2F/bob"] = []byte(`{"user":"bob","vhost":"/","configure":"(","write":"","read":""}`)
	if _, err := New(st, Options{}); !errors.Is(err, ErrBadRegex) {
		t.Fatalf("bad stored regex: %v", err)
	}
	// A permission whose user is gone (interrupted DeleteUser) is dropped
	// rather than inherited by a later user of the same name.
	st = newMemStore()
	st.m["perm/%2F/ghost"] = []byte(`{"user":"ghost","vhost":"/","configure":".*","write":".*","read":".*"}`)
	us := mustNew(t, st, Options{})
	if len(us.ListPermissions()) != 0 || len(st.keys()) != 0 {
		t.Fatalf("orphan kept: %v", st.keys())
	}
	_ = us.PutUser("ghost", "pw", nil)
	g, _ := us.Lookup("ghost")
	if us.CanAccessVHost(g, "/") {
		t.Fatal("orphan permission inherited")
	}
}

// TestConcurrent exercises lock-free reads against writers under -race.
func TestConcurrent(t *testing.T) {
	us := mustNew(t, newMemStore(), defaultOpts())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			name := fmt.Sprintf("u%d", w)
			for i := 0; i < 200; i++ {
				_ = us.PutUser(name, "pw", []string{"management"})
				_ = us.SetPermissions(name, "/", ".*", fmt.Sprintf("^q%d", i), ".*")
				if i%10 == 0 {
					_ = us.DeleteUser(name)
				}
			}
		}(w)
	}
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				if u, err := us.Authenticate("guest", "guest", local); err == nil {
					_ = us.Check(u, "/", Write, "queue", "q1")
				}
				if u, ok := us.Lookup("u1"); ok {
					_ = us.Check(u, "/", Write, "queue", "q1")
					_ = u.Tags()
				}
				_ = us.ListPermissions()
			}
		}()
	}
	wg.Wait()
}

func BenchmarkCheck(b *testing.B) {
	us := mustNew(b, newMemStore(), defaultOpts())
	_ = us.PutUser("bob", "pw", nil)
	_ = us.SetPermissions("bob", "/", ".*", "^bob-", ".*")
	bob, _ := us.Lookup("bob")
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
			_ = us.Check(bob, "/", Read, "queue", "bob-q")
		}
	})
	b.Run("regex", func(b *testing.B) {
		for b.Loop() {
			_ = us.Check(bob, "/", Write, "queue", "bob-q")
		}
	})
}
