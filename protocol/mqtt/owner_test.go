package mqtt

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"
)

// lockedStore is a memStore safe for the connections' goroutines.
type lockedStore struct {
	mu sync.Mutex
	memStore
}

func (s *lockedStore) PutMeta(key string, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memStore.PutMeta(key, val)
}

func (s *lockedStore) DeleteMeta(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memStore.DeleteMeta(key)
}

func (s *lockedStore) GetMeta(key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memStore.GetMeta(key)
}

func (s *lockedStore) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memStore.LoadMeta(prefix, fn)
}

// connect3 sends an MQTT 3.1.1 CONNECT with clean session off and
// returns the CONNACK's session present flag and return code.
func connect3(t *testing.T, addr, user, pass, id string) (net.Conn, bool, byte) {
	t.Helper()
	nc, ack := rawConnect3(t, addr, user, pass, id, 0xC0, 0, 5*time.Second) // user name, password, no clean session
	return nc, ack[0]&1 == 1, ack[1]
}

// rawConnect3 dials addr and sends an MQTT 3.1.1 CONNECT with flags and
// keep-alive seconds; it returns the connection (read deadline wait) and
// the CONNACK's body.
func rawConnect3(t *testing.T, addr, user, pass, id string, flags byte, keepalive uint16, wait time.Duration) (net.Conn, []byte) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	var body []byte
	body = benchString(body, "MQTT")
	body = append(body, 4, flags)
	body = binary.BigEndian.AppendUint16(body, keepalive)
	body = benchString(body, id)
	body = benchString(body, user)
	body = benchString(body, pass)
	if _, err := nc.Write(benchPacket(nil, 0x10, body)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	first, ack := benchReadPacket(t, nc)
	if first>>4 != 2 || len(ack) < 2 {
		t.Fatalf("CONNACK: %x %x", first, ack)
	}
	return nc, ack
}

// released waits until nobody holds the session of key.
func released(t *testing.T, s *Server, key string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		se := s.sessions[key]
		held := false
		if se != nil {
			se.mu.Lock()
			held = se.owner != nil
			se.mu.Unlock()
		}
		s.mu.Unlock()
		if !held {
			return
		}
	}
	t.Fatalf("session %q still held", key)
}

// TestLegacySessionAdopted: a session record stored before sessions had
// owners is adopted by the first user who resumes it, and from then on it
// is that user's (owner.go).
func TestLegacySessionAdopted(t *testing.T) {
	const key = sessionPrefix + "/\x00legacy"
	st := &lockedStore{memStore: memStore{m: map[string][]byte{
		key: []byte(`{"exp":4294967295,"subs":[{"f":"a/b","q":1}]}`),
	}}}
	s, addr := testServerWith(t, st)
	if err := s.users.PutUser("other", "pw", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.users.SetPermissions("other", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}

	nc, present, code := connect3(t, addr, "guest", "guest", "legacy")
	if code != 0 || !present {
		t.Fatalf("first resume of an ownerless record: present %v, code %d", present, code)
	}
	var rec sessionRecord
	st.mu.Lock()
	err := json.Unmarshal(st.m[key], &rec)
	st.mu.Unlock()
	if err != nil || rec.User != "guest" || len(rec.Subs) != 1 {
		t.Fatalf("record after adoption: %+v (%v), want owner guest and its subscription", rec, err)
	}

	// While guest holds it, another user is refused (return code 5).
	if _, _, code := connect3(t, addr, "other", "pw", "legacy"); code != v3NotAuthorized {
		t.Fatalf("other user while the owner is connected: code %d, want 5", code)
	}
	nc.Close()
	released(t, s, "/\x00legacy")

	// With guest away, another user gets a fresh session; the record is
	// now the newcomer's.
	if _, present, code := connect3(t, addr, "other", "pw", "legacy"); code != 0 || present {
		t.Fatalf("other user with guest away: present %v, code %d", present, code)
	}
	st.mu.Lock()
	err = json.Unmarshal(st.m[key], &rec)
	st.mu.Unlock()
	if err != nil || rec.User != "other" || len(rec.Subs) != 0 {
		t.Fatalf("record after the other user: %+v (%v)", rec, err)
	}
}
