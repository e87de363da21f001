package auth

import (
	"errors"
	"reflect"
	"testing"
)

// batchStore is a memStore that writes batches: all of them, or none
// when failBatch is set.
type batchStore struct {
	*memStore
	batches   [][]string
	failBatch error
}

func (s *batchStore) WriteMetaBatch(keys []string, vals [][]byte) error {
	if s.failBatch != nil {
		return s.failBatch
	}
	s.batches = append(s.batches, append([]string(nil), keys...))
	for i, k := range keys {
		var err error
		if vals[i] == nil {
			err = s.memStore.DeleteMeta(k)
		} else {
			err = s.memStore.PutMeta(k, vals[i])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TestCommandCodec: a command round-trips; a newer version, operation
// or field is unreadable (a reader stops on it), bytes that do not
// decode are ErrBadCommand.
func TestCommandCodec(t *testing.T) {
	c := Command{Op: OpSetTopicPermissions, Actor: "admin", User: "u", VHost: "/", Exchange: "amq.topic", Write: "^a", Read: ".*",
		Tags: []string{"management"}, PasswordHash: "x"}
	got, err := DecodeCommand(EncodeCommand(c))
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for name, b := range map[string][]byte{
		"version":   {2, '{', '}'},
		"operation": append([]byte{1}, `{"op":99}`...),
		"field":     append([]byte{1}, `{"op":1,"user":"u","mfa":"x"}`...),
	} {
		if _, err := DecodeCommand(b); !IsUnreadable(err) {
			t.Errorf("newer %s: %v, want unreadable", name, err)
		}
	}
	for name, b := range map[string][]byte{"empty": nil, "json": append([]byte{1}, `{"op":`...), "version 0": {0}} {
		if _, err := DecodeCommand(b); !errors.Is(err, ErrBadCommand) || IsUnreadable(err) {
			t.Errorf("%s: %v, want ErrBadCommand", name, err)
		}
	}
}

// TestApplyOneBatch: standalone, a command's records are written in one
// store batch (a user's delete with its permissions and topic
// permissions), and a batch that fails changes nothing, in memory or on
// disk.
func TestApplyOneBatch(t *testing.T) {
	st := &batchStore{memStore: newMemStore()}
	us := mustNew(t, st, Options{})
	for _, err := range []error{
		us.PutUser("u", "pw", nil),
		us.SetPermissions("u", "/", ".*", ".*", ".*"),
		us.SetPermissions("u", "v", ".*", ".*", ".*"),
		us.SetTopicPermissions("u", "/", "amq.topic", ".*", ".*"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	st.batches = nil
	boom := errors.New("boom")
	st.failBatch = boom
	if err := us.DeleteUser("u"); !errors.Is(err, boom) {
		t.Fatalf("delete with a failing store: %v", err)
	}
	if _, ok := us.Lookup("u"); !ok || len(st.keys()) != 4 || len(us.TopicPermissions("u", "/")) != 1 {
		t.Fatalf("a failed batch changed something: user %v, records %v", ok, st.keys())
	}
	st.failBatch = nil
	if err := us.DeleteUser("u"); err != nil {
		t.Fatal(err)
	}
	want := []string{"tperm/" + "/" + "\x00u\x00amq.topic", "perm//\x00u", "perm/v\x00u", "user/u"}
	if len(st.batches) != 1 || len(st.batches[0]) != 4 || len(st.keys()) != 0 {
		t.Fatalf("batches %q (want one of %d records), left %q", st.batches, len(want), st.keys())
	}
}

// TestDoNeedsAdministrator: Do refuses a users command to an actor
// without the administrator tag, and changes nothing; an administrator's
// and the broker's own (Unrestricted) are applied.
func TestDoNeedsAdministrator(t *testing.T) {
	us := mustNew(t, newMemStore(), defaultOpts())
	if err := us.PutUser("bob", "pw", []string{"management", "policymaker"}); err != nil {
		t.Fatal(err)
	}
	bob, _ := us.Lookup("bob")
	guest, _ := us.Lookup("guest")
	for _, c := range []Command{
		{Op: OpPutUser, User: "mallory"},
		{Op: OpSetPermissions, User: "bob", VHost: "/", Configure: ".*", Write: ".*", Read: ".*"},
		{Op: OpDeleteUser, User: "guest"},
	} {
		if err := us.Do(Actor{Users: us, User: bob}, c); !errors.Is(err, ErrAccessRefused) {
			t.Fatalf("%v by a non-administrator: %v, want ErrAccessRefused", c.Op, err)
		}
		if err := us.Do(Actor{Users: us}, c); !errors.Is(err, ErrAccessRefused) {
			t.Fatalf("%v by no user: %v, want ErrAccessRefused", c.Op, err)
		}
	}
	if _, ok := us.Lookup("mallory"); ok {
		t.Fatal("a refused command created a user")
	}
	if _, ok := us.Permissions("bob", "/"); ok {
		t.Fatal("a refused command set a permission")
	}
	if err := us.Do(Actor{Users: us, User: guest}, Command{Op: OpSetPermissions, User: "bob", VHost: "/", Configure: ".*", Write: ".*", Read: ".*"}); err != nil {
		t.Fatalf("an administrator's command: %v", err)
	}
	if err := us.Do(Actor{Unrestricted: true}, Command{Op: OpPutUser, User: "carol"}); err != nil {
		t.Fatalf("the broker's own command: %v", err)
	}
	if _, ok := us.Permissions("bob", "/"); !ok {
		t.Fatal("the administrator's command was not applied")
	}
}

// TestApplyCommittedIdempotent: a committed command applies on every
// node alike and twice changes nothing more; one whose user is gone is a
// no-op, not an error.
func TestApplyCommittedIdempotent(t *testing.T) {
	us := mustNew(t, newMemStore(), Options{})
	put := Command{Op: OpPutUser, User: "u", PasswordHash: ""}
	for i := 0; i < 2; i++ {
		recs, err := us.ApplyCommitted(put)
		if err != nil || len(recs) != 1 || recs[0].Key != "user/u" || recs[0].Val == nil {
			t.Fatalf("apply %d: %+v %v", i, recs, err)
		}
	}
	del := Command{Op: OpDeleteUser, User: "u"}
	if recs, err := us.ApplyCommitted(del); err != nil || len(recs) != 1 || recs[0].Val != nil {
		t.Fatalf("delete: %+v %v", recs, err)
	}
	if recs, err := us.ApplyCommitted(del); err != nil || len(recs) != 0 {
		t.Fatalf("delete again: %+v %v", recs, err)
	}
	if recs, err := us.ApplyCommitted(Command{Op: OpSetPermissions, User: "u", VHost: "/"}); err != nil || len(recs) != 0 {
		t.Fatalf("permission of a user gone: %+v %v", recs, err)
	}
	if _, err := us.ApplyCommittedEntry([]byte{7}); !IsUnreadable(err) {
		t.Fatalf("newer entry: %v", err)
	}
}
