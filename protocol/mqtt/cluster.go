package mqtt

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/trident-broker/trident/exchange"
)

// In a cluster (Config.NodeName set) the front end's records are
// cluster-wide: every write of one goes through Config.Replicator (the
// node's metadata group), and the node calls ApplyMeta on every node,
// this one included, once a write is committed.
//
//   - Retained messages: every node's in-memory index follows the
//     committed records (retainedStore.apply), so a subscriber on any
//     node gets a message retained on any other. RabbitMQ keeps retained
//     messages node-local.
//   - Persistent sessions: the record (subscriptions, expiry, QoS 2
//     packet ids) names the node whose connection last took the session
//     and that connection's number (Gen). A client that connects to
//     another node resumes the session there: the node waits until it
//     has applied every record committed so far (a barrier: one
//     replicated write per CONNECT that asks for a persistent session or
//     no clean start), loads the record, claims it (writes it back with
//     its own name and Gen+1) and consumes the session's durable queue,
//     which stays on the node it was declared on and is reached through
//     the core's proxy queue. What a taken-over connection changes after
//     the claim (a late SUBSCRIBE) is lost.
//   - Takeover across nodes: a node that sees a newer record of a session
//     it holds forgets it (timers stopped, nothing deleted) and
//     disconnects its connection if one is open (session taken over), as
//     RabbitMQ's MQTT plugin does in a cluster. No RPC is needed: the
//     claim is a replicated write. It is asynchronous: the new connection
//     is accepted without waiting for the old one to close, so both may
//     receive from the queue for a moment; what the old one had not
//     acknowledged goes back to the queue and is delivered again.
//   - Expiry: the node that last held a session runs its expiry timer,
//     and it checks the stored record before deleting anything; while
//     that node is down a live node expires the session (orphan.go).
//   - Owner: the record names the session's user and whether a connection
//     holds it (Off), so another user is refused on any node while the
//     owner is connected (owner.go).
//
// Non-durable queues are cluster-wide in the core (they live on the node
// that declared them and are routed to from every node), so clean-session
// subscribers receive what is published on any node, and the members of
// a shared subscription group on different nodes share the group's one
// queue (it lives on the node of the member that created it; if that
// node dies the queue goes with it and the other members' subscriptions
// end, as the queue of a clean session would).
//
// Node-local: connections, in-flight QoS 1 deliveries (back to the queue
// when the connection ends), topic aliases, will delay timers, and the
// takeover of non-persistent sessions (clean session, expiry 0: a second
// connection with the same client id on another node does not take them
// over).

// ReplicatedKey reports whether key is one of the front end's records
// that a cluster shares: retained messages and persistent sessions.
func ReplicatedKey(key string) bool {
	return strings.HasPrefix(key, retainedPrefix) || strings.HasPrefix(key, sessionPrefix)
}

// ApplyMeta brings memory in line with committed records (a hook of the
// node's metadata group). Idempotent; it takes only short locks that no
// writer holds while its own write is being committed, and never waits
// for the store or the core.
func (s *Server) ApplyMeta(ops []exchange.MetaOp) error {
	for _, op := range ops {
		switch {
		case op.Prefix:
			if strings.HasPrefix(op.Key, retainedPrefix) || strings.HasPrefix(retainedPrefix, op.Key) {
				s.retained.applyPrefix(op.Key)
			}
			if strings.HasPrefix(op.Key, sessionPrefix) || strings.HasPrefix(sessionPrefix, op.Key) {
				s.applySessionPrefix(op.Key)
			}
		case strings.HasPrefix(op.Key, retainedPrefix):
			s.retained.apply(op.Key, op.Val)
		case strings.HasPrefix(op.Key, sessionPrefix):
			s.applySession(strings.TrimPrefix(op.Key, sessionPrefix), op.Val)
		}
	}
	return nil
}

// Resync reads the retained messages from the store again. A node calls
// it once ApplyMeta reaches the server, for the records committed since
// NewServer loaded them, and indexes the session records of other nodes
// again (orphan.go). Sessions themselves need no resync: a connection
// reads its session's record, and an expiry checks it, before either
// acts.
func (s *Server) Resync() error {
	if err := s.reindex(); err != nil {
		return err
	}
	return s.retained.reload(s.st)
}

func (s *Server) clustered() bool { return s.cfg.NodeName != "" }

// ownRecord reports whether a session record was last written by this
// node (standalone: every record is).
func (s *Server) ownRecord(rec *sessionRecord) bool {
	return !s.clustered() || rec.Node == "" || rec.Node == s.cfg.NodeName
}

// newer reports whether rec supersedes a session this node holds at gen:
// a later connection, or one as late on a node with a greater name.
func (s *Server) newer(rec *sessionRecord, gen uint64) bool {
	return rec.Gen > gen || (rec.Gen == gen && rec.Node > s.cfg.NodeName)
}

// applySession handles a committed write of the session record of key
// (vhost + "\x00" + client id; val nil: deleted).
func (s *Server) applySession(key string, val []byte) {
	if !s.clustered() {
		return
	}
	var rec sessionRecord
	if val != nil {
		if json.Unmarshal(val, &rec) != nil {
			return
		}
		s.indexRecord(key, &rec)
		if s.ownRecord(&rec) {
			return // this node's own write
		}
	} else {
		s.indexRecord(key, nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.sessions[key]
	if se == nil {
		return
	}
	se.mu.Lock()
	owner := se.owner
	switch {
	case val == nil && owner != nil:
		// A connection here holds the session: the delete is this
		// node's (a clean start or an expiry 0), or the end of a session
		// that was not claimed from here; either way not a takeover.
		se.mu.Unlock()
		return
	case val != nil && !s.newer(&rec, se.gen):
		// A connection superseded here wrote late: assert this node's
		// record again, so the stored one names the session's holder.
		reassert := se.persistent && !se.moved && !se.ended
		se.mu.Unlock()
		if reassert {
			go func() {
				if err := s.saveSession(se); err != nil {
					s.log.Warn("store session", "client_id", se.clientID(), "err", err)
				}
			}()
		}
		return
	}
	s.forgetLocked(se)
	se.mu.Unlock()
	if owner != nil {
		s.log.Info("session taken over on another node", "client_id", se.clientID(), "node", rec.Node)
		go owner.serverDisconnect(codeSessionTakenOver)
	}
}

// applySessionPrefix handles the delete of every session record under
// prefix: the sessions no connection here holds are forgotten.
func (s *Server) applySessionPrefix(prefix string) {
	if !s.clustered() {
		return
	}
	s.forgetPrefix(prefix)
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, se := range s.sessions {
		if !strings.HasPrefix(sessionPrefix+key, prefix) {
			continue
		}
		se.mu.Lock()
		if se.owner == nil {
			s.forgetLocked(se)
		}
		se.mu.Unlock()
	}
}

// forgetLocked drops a session that lives on elsewhere from memory,
// without deleting its queue or record (s.mu and se.mu held).
func (s *Server) forgetLocked(se *session) {
	se.moved, se.ended = true, true
	se.stopTimersLocked()
	if s.sessions[se.key] == se {
		delete(s.sessions, se.key)
	}
}

// barrierKey is a session key no session has (empty vhost and client
// id): its delete is the barrier's replicated write.
const barrierKey = sessionPrefix + "\x00"

// barrier returns once this node has applied every record committed
// before it was called: followers apply a commit a moment after it, and
// a replicated write returns only once applied here (read-your-writes),
// after everything committed before it. The write is the delete of a
// record that never exists.
func (s *Server) barrier() error { return s.shared.DeleteMeta(barrierKey) }

// errFound stops loadRecord's scan.
var errFound = errors.New("mqtt: record found")

// loadRecord reads the stored record of session key, nil if none.
func (s *Server) loadRecord(key string) (*sessionRecord, error) {
	want := sessionPrefix + key
	var rec *sessionRecord
	// The record sorts first among the keys it prefixes (client ids
	// that extend this one): the scan stops at the first key.
	err := s.st.LoadMeta(want, func(k string, val []byte) error {
		if k == want {
			var r sessionRecord
			if err := json.Unmarshal(val, &r); err != nil {
				s.log.Warn("corrupt session record skipped", "key", k, "err", err)
			} else {
				rec = &r
			}
		}
		return errFound
	})
	if errors.Is(err, errFound) {
		err = nil
	}
	return rec, err
}

// staleLocked reports whether a session held in memory (nil: none) must
// give way to its stored record rec: nobody is connected to it here and
// the record is newer. A stale session is forgotten (s.mu held).
func (s *Server) staleLocked(se *session, rec *sessionRecord) bool {
	if se == nil {
		return true
	}
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.owner != nil || !s.newer(rec, se.gen) {
		return false
	}
	s.forgetLocked(se)
	return true
}

// stillHere reports, before a disconnected session expires, whether its
// stored record still names this node's last connection; if not, the
// session is forgotten here and left to the node that took it.
func (s *Server) stillHere(se *session) bool {
	if !s.clustered() {
		return true
	}
	rec, err := s.loadRecord(se.key)
	if err != nil {
		s.log.Warn("read session record", "client_id", se.clientID(), "err", err)
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	se.mu.Lock()
	defer se.mu.Unlock()
	if rec != nil && !s.newer(rec, se.gen) {
		return true
	}
	if se.owner == nil {
		s.forgetLocked(se)
	}
	return false
}
