package mqtt

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Store key prefixes of the front end's records.
const (
	sessionPrefix  = "mqtt-session/"
	retainedPrefix = "mqtt-retained/"
)

// expiryNever is the MQTT 5 session expiry interval meaning "never".
const expiryNever = 0xFFFFFFFF

// subscription is one topic filter of a session.
type subscription struct {
	Filter   string `json:"f"`           // MQTT filter, without $share/group/
	Share    string `json:"g,omitempty"` // shared subscription group, "" if none
	QoS      byte   `json:"q"`
	NoLocal  bool   `json:"nl,omitempty"`
	RAP      bool   `json:"rap,omitempty"` // retain as published
	Handling byte   `json:"rh,omitempty"`  // retain handling
	ID       int    `json:"id,omitempty"`  // subscription identifier
	queue    string // the queue consumed for it
}

// key is the subscription's binding key, made when asked for (binding
// and unbinding): the binding holds it, so that a subscription holding
// it too cost 16 bytes a subscription, which took it out of the 64-byte
// size class.
func (s *subscription) key() string { return filterKey(s.Filter) }

func (s *subscription) same(o *subscription) bool { return s.Filter == o.Filter && s.Share == o.Share }

// session is the state that outlives a connection: for a persistent
// session until it expires, across restarts through its store record.
type session struct {
	key   string // vhost + "\x00" + client id (vhost and clientID cut it)
	qname string // queueName()

	// subs is replaced, never modified (copy on write under mu); the
	// writer goroutine reads it without a lock.
	subs atomic.Pointer[[]*subscription]

	mu sync.Mutex
	// user is the session's owner: the name of the user whose
	// connection created or last resumed it ("" for a record stored
	// before sessions had owners: the first user to resume it adopts
	// it). Another user never resumes it (owner.go).
	user       string
	persistent bool
	// ended, moved and elsewhere are described below; the flags sit
	// together (with padding after each a session took the 288-byte size
	// class, not the 256-byte one).
	ended, moved, elsewhere bool
	expiry                  uint32 // session expiry interval in seconds, expiryNever: never
	// owner is the connected connection, nil if none; its left signal
	// fires once it has let go of the session (conn.cleanup).
	owner *conn
	// rare holds the QoS 2 packet ids, the expiry's and the delayed
	// will's timers, made by the first that needs one (rareLocked): most
	// sessions never see QoS 2, a will delay or an expiry while
	// disconnected, and five fields of every session took it out of the
	// 128-byte size class.
	rare *sessionRare
	// qos2Dirty: the QoS 2 packet ids (qos2In, the owner's released
	// inflight) changed since the record was last saved; see qos2.go.
	qos2Dirty atomic.Bool
	// saveMu serialises record writes, so the last write holds the
	// latest state.
	saveMu sync.Mutex

	// ended: the session is over (its queue and record being dropped).
	// dropping, while an ended session's queue and record are being
	// removed, is closed once they are: the session stays in the
	// server's map until then, so that a new session of the client id
	// cannot start (and declare its queue under the same name) before the
	// old one's removal is done.
	dropping chan struct{}
	// gen counts the connections that took the session (its record's
	// Gen); moved: a connection on another node took it (cluster.go),
	// so this node neither writes nor ends it any more.
	gen uint64
	// offAt is when the last connection ended (Unix ms; zero while
	// connected, or
	// never); elsewhere, in a cluster, that the record says the session's
	// connection on another node is open and that node alive: another
	// user is refused as if the owner were connected here (owner.go).
	offAt int64
}

// sessionRare is what few sessions use (session.rare; under se.mu).
type sessionRare struct {
	// qos2In holds the inbound QoS 2 packet ids awaiting PUBREL, each
	// with the connection that received it (nil: an earlier one, or
	// before a restart), for the receive maximum's count. Made by the
	// first (addQoS2In).
	qos2In map[uint16]*conn
	// relOut are the outbound QoS 2 packet ids awaiting PUBCOMP, while
	// disconnected (setRelOut; nil if none).
	relOut []uint16
	// willTimer publishes the will of a connection that ended, after its
	// delay (will.go).
	willTimer *time.Timer
	// expTimer ends a disconnected persistent session when its expiry
	// interval has passed (armExpiry); expiresAt is when (Unix ns), for
	// management (admin.go).
	expTimer  *time.Timer
	expiresAt int64
}

// rareLocked returns se.rare, made if need be (se.mu held).
func (se *session) rareLocked() *sessionRare {
	if se.rare == nil {
		se.rare = &sessionRare{}
	}
	return se.rare
}

// qos2InMap is the inbound QoS 2 packet ids awaiting PUBREL, nil if none
// was ever recorded (se.mu held; addQoS2In adds).
func (se *session) qos2InMap() map[uint16]*conn {
	if se.rare == nil {
		return nil
	}
	return se.rare.qos2In
}

// stopExpiryLocked stops the expiry timer, if any (se.mu held).
func (se *session) stopExpiryLocked() {
	if se.rare != nil && se.rare.expTimer != nil {
		se.rare.expTimer.Stop()
		se.rare.expTimer = nil
	}
}

// expiresAtLocked is when the expiry timer fires (Unix ns), 0 if it was
// never armed (se.mu held).
func (se *session) expiresAtLocked() int64 {
	if se.rare == nil {
		return 0
	}
	return se.rare.expiresAt
}

// stopWillLocked stops the delayed will's timer, if any (se.mu held).
func (se *session) stopWillLocked() {
	if se.rare != nil && se.rare.willTimer != nil {
		se.rare.willTimer.Stop()
		se.rare.willTimer = nil
	}
}

// setRelOut sets se's outbound packet ids awaiting PUBCOMP to l (se.mu
// held).
func (se *session) setRelOut(l []uint16) {
	if len(l) == 0 {
		if se.rare != nil {
			se.rare.relOut = nil
		}
		return
	}
	se.rareLocked().relOut = l
}

// relOutList is se's outbound packet ids awaiting PUBCOMP (se.mu held).
func (se *session) relOutList() []uint16 {
	if se.rare == nil {
		return nil
	}
	return se.rare.relOut
}

func newSession(vhost, clientID string) *session {
	// One string for the three: the vhost and client id are parts of key.
	key := vhost + "\x00" + clientID
	se := &session{key: key}
	se.qname = se.queueName()
	se.subs.Store(&[]*subscription{})
	return se
}

// vhost is the session's vhost: its key up to the first NUL (a vhost
// name has none; loadSessions cuts a record's key there too). Cut when
// asked for, not kept: two string headers fewer in every session.
func (se *session) vhost() string {
	vh, _, _ := strings.Cut(se.key, "\x00")
	return vh
}

// clientID is the session's client id: its key after the vhost.
func (se *session) clientID() string {
	_, id, _ := strings.Cut(se.key, "\x00")
	return id
}

// queueName is the session's own queue, as RabbitMQ names it.
func (se *session) queueName() string { return "mqtt-subscription-" + se.clientID() + "qos1" }

// sharedQueueName is the queue of a shared subscription group.
func sharedQueueName(group, filter string) string { return "mqtt-shared-" + group + "-" + filter }

func (se *session) subList() []*subscription { return *se.subs.Load() }

// setSubs publishes a new subscription list (se.mu held).
func (se *session) setSubs(l []*subscription) { se.subs.Store(&l) }

func (se *session) stopTimers() {
	se.mu.Lock()
	defer se.mu.Unlock()
	se.stopTimersLocked()
}

// stopTimersLocked stops the session's expiry and delayed-will timers
// (se.mu held).
func (se *session) stopTimersLocked() {
	se.stopExpiryLocked()
	se.stopWillLocked()
}

// sessionRecord is a persistent session's stored form.
type sessionRecord struct {
	Expiry uint32          `json:"exp"`
	Subs   []*subscription `json:"subs"`
	// QoS2In are inbound QoS 2 packet ids awaiting PUBREL, RelOut
	// outbound ones awaiting PUBCOMP (qos2.go).
	QoS2In []uint16 `json:"q2in,omitempty"`
	RelOut []uint16 `json:"q2out,omitempty"`
	// Node is the node whose connection last took the session ("" when
	// standalone) and Gen that connection's number (cluster.go).
	Node string `json:"node,omitempty"`
	Gen  uint64 `json:"gen,omitempty"`
	// User is the session's owner (owner.go); absent in records stored
	// before sessions had owners.
	User string `json:"user,omitempty"`
	// Off is when the session's last connection ended (Unix ms), 0 while
	// one is open (cluster.go, orphan.go).
	Off int64 `json:"off,omitempty"`
}

func (s *Server) sessionKey(se *session) string { return sessionPrefix + se.key }

// saveSession writes a persistent session's record, durably, with its
// QoS 2 state as it is when the write starts. A session that moved to
// another node is not written.
func (s *Server) saveSession(se *session) error {
	se.saveMu.Lock()
	defer se.saveMu.Unlock()
	se.qos2Dirty.Store(false)
	se.mu.Lock()
	if se.moved {
		se.mu.Unlock()
		return nil
	}
	rec := sessionRecord{Expiry: se.expiry, Subs: se.subList(), RelOut: slices.Clone(se.relOutList()),
		Node: s.cfg.NodeName, Gen: se.gen, User: se.user}
	if se.owner == nil && se.offAt != 0 {
		rec.Off = se.offAt
	}
	for pid := range se.qos2InMap() {
		rec.QoS2In = append(rec.QoS2In, pid)
	}
	owner := se.owner
	se.mu.Unlock()
	if owner != nil {
		rec.RelOut = owner.releasedPIDs(rec.RelOut)
	}
	slices.Sort(rec.QoS2In)
	slices.Sort(rec.RelOut)
	rec.RelOut = slices.Compact(rec.RelOut)
	val, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return s.shared.PutMeta(s.sessionKey(se), val)
}

// loadSessions restores the persistent sessions last taken on this node
// (in a cluster, the others are loaded when a client resumes them here);
// each starts its expiry timer as if its connection had just gone.
func (s *Server) loadSessions() error {
	return s.st.LoadMeta(sessionPrefix, func(key string, val []byte) error {
		vh, id, ok := strings.Cut(strings.TrimPrefix(key, sessionPrefix), "\x00")
		if !ok {
			return nil
		}
		var rec sessionRecord
		if err := json.Unmarshal(val, &rec); err != nil {
			s.log.Warn("corrupt session record skipped", "key", key, "err", err)
			return nil
		}
		if !s.ownRecord(&rec) {
			s.indexRecord(strings.TrimPrefix(key, sessionPrefix), &rec)
			return nil
		}
		se := s.sessionFromRecord(vh, id, &rec)
		s.sessions[se.key] = se
		s.armExpiry(se)
		return nil
	})
}

// addQoS2In records pid among the inbound QoS 2 packet ids awaiting
// PUBREL; it runs under se.mu.
func (se *session) addQoS2In(pid uint16, c *conn) {
	r := se.rareLocked()
	if r.qos2In == nil {
		r.qos2In = map[uint16]*conn{}
	}
	r.qos2In[pid] = c
}

// sessionFromRecord builds a disconnected persistent session.
func (s *Server) sessionFromRecord(vh, id string, rec *sessionRecord) *session {
	se := newSession(vh, id)
	se.persistent, se.expiry, se.gen, se.user = true, rec.Expiry, rec.Gen, rec.User
	for _, pid := range rec.QoS2In {
		se.addQoS2In(pid, nil)
	}
	se.setRelOut(rec.RelOut)
	if rec.Off > 0 {
		se.offAt = rec.Off
	}
	for _, sub := range rec.Subs {
		s.prepareSub(se, sub)
	}
	se.setSubs(rec.Subs)
	return se
}

// prepareSub fills in a subscription's queue.
func (s *Server) prepareSub(se *session, sub *subscription) {
	if sub.Share != "" {
		sub.queue = sharedQueueName(sub.Share, sub.Filter)
	} else {
		sub.queue = se.qname
	}
}

// armExpiry starts a disconnected persistent session's expiry timer
// (se.mu not held).
func (s *Server) armExpiry(se *session) {
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.expiry == expiryNever || se.owner != nil || se.ended {
		return
	}
	d := time.Duration(se.expiry) * time.Second
	r := se.rareLocked()
	if r.expTimer != nil {
		r.expTimer.Stop()
	}
	r.expTimer = time.AfterFunc(d, func() { s.expireSession(se) })
	r.expiresAt = time.Now().Add(d).UnixNano()
}

// expireSession ends a session whose expiry interval has passed, unless
// its record shows that it moved to another node meanwhile.
func (s *Server) expireSession(se *session) {
	if !s.stillHere(se) {
		return
	}
	s.mu.Lock()
	if s.sessions[se.key] != se {
		s.mu.Unlock()
		return
	}
	se.mu.Lock()
	if se.owner != nil || se.ended {
		se.mu.Unlock()
		s.mu.Unlock()
		return
	}
	se.ended = true
	se.mu.Unlock()
	delete(s.sessions, se.key)
	s.mu.Unlock()
	s.dropSession(se)
}

// dropSession deletes an ended session's queue, shared consumers' state
// and record; a session that moved to another node is not this node's to
// delete.
func (s *Server) dropSession(se *session) {
	se.mu.Lock()
	moved := se.moved
	se.mu.Unlock()
	if moved {
		return
	}
	if vh, ok := s.b.VHost(se.vhost()); ok {
		_, _ = vh.DeleteQueue(se.qname, false, false, nil)
	}
	if se.persistent {
		if err := s.shared.DeleteMeta(sessionPrefix + se.key); err != nil {
			s.log.Warn("delete session record", "client_id", se.clientID(), "err", err)
		}
	}
}
