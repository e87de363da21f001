package mqtt

import (
	"errors"

	"github.com/trident-broker/trident/exchange"
)

// Sessions belong to users. A session records the name of the user whose
// connection created it (session.user, stored in its record), and only
// that user resumes it; the client id alone proves nothing.
//
//   - The same user connecting with the client id takes the session over
//     as MQTT says (the connection holding it is disconnected, session
//     present = 1 when the session is persistent).
//   - Another user, while the owner is connected: the CONNECT is refused
//     (MQTT 5 0x87 Not authorized, 3.1.1 return code 5), so that one user
//     cannot disconnect another.
//   - Another user, while the owner is not connected: the owner's session
//     is discarded (its queue, with the messages queued for it, and its
//     record are deleted; a pending delayed will is dropped) and logged at
//     WARN; the newcomer starts a fresh session (session present = 0).
//   - A record stored before sessions had owners has none: the first user
//     to resume it adopts it, and its subscriptions are checked against
//     that user's permissions like any resumed session's (recheckSubs).
//
// In a cluster the same holds across nodes: the session's record says
// whether a connection holds it (Off 0, written by every connect and
// disconnect) and on which node; while that node is alive (Config.LiveNodes)
// and the record says connected, another user is refused on any node. A
// session of a node that is down counts as not connected: the newcomer
// discards it.
//
// On every resume the stored subscriptions are checked again against the
// user's current permissions (recheckSubs); those no longer allowed are
// removed and unbound before anything is delivered. Messages already
// queued for the session under a removed filter then match none of its
// subscriptions and are dropped at delivery (packetWriter.delivery), while
// those a kept filter matches are still delivered.

// errSessionOwned refuses a CONNECT whose client id names a session that
// another user's connection holds.
var errSessionOwned = errors.New("mqtt: client id in use by another user's connection")

// foreignLocked judges a session found for a CONNECT of user. A session
// of this user, or of none (an old record), is the caller's to take:
// foreign reports false and s.mu stays held. Otherwise s.mu is released:
// with the owner connected it returns errSessionOwned; with the owner
// away it discards the session (removal done when it returns) and
// reports true with the session's Gen.
func (s *Server) foreignLocked(se *session, user string) (discarded bool, gen uint64, _ error) {
	se.mu.Lock()
	if se.user == "" || se.user == user {
		se.mu.Unlock()
		return false, 0, nil
	}
	if se.owner != nil {
		se.mu.Unlock()
		s.mu.Unlock()
		return false, 0, errSessionOwned
	}
	if se.elsewhere {
		// Its record says a connection on another node that is alive
		// holds it: refused as if it were here, and forgotten here.
		se.moved, se.ended = true, true
		if s.sessions[se.key] == se {
			delete(s.sessions, se.key)
		}
		se.mu.Unlock()
		s.mu.Unlock()
		return false, 0, errSessionOwned
	}
	owner, gen := se.user, se.gen
	se.ended = true
	done := make(chan struct{})
	se.dropping = done // a concurrent takeSession waits for the removal
	se.stopTimersLocked()
	se.mu.Unlock()
	s.mu.Unlock()
	s.log.Warn("MQTT session of another user discarded: a client of a different user connected with its client id",
		"client_id", se.clientID(), "vhost", se.vhost(), "owner", owner, "user", user)
	s.dropSession(se)
	s.mu.Lock()
	if s.sessions[se.key] == se {
		delete(s.sessions, se.key)
	}
	s.mu.Unlock()
	close(done)
	return true, gen, nil
}

// recheckSubs checks a resumed session's subscriptions against the
// user's current permissions (mqtt.deny_subscribe, the vhost permissions
// and topic permissions a SUBSCRIBE is checked against) before they are
// consumed: those no longer allowed are removed from the session, their
// bindings undone; the record is saved.
// It returns the subscriptions to resume.
func (c *conn) recheckSubs() []*subscription {
	se := c.se
	subs := se.subList()
	var kept, removed []*subscription
	for i, sub := range subs {
		if !c.s.denied(sub.Filter) && c.checkSubscribe(sub) == nil {
			if removed != nil {
				kept = append(kept, sub)
			}
			continue
		}
		if removed == nil {
			kept = append(make([]*subscription, 0, len(subs)), subs[:i]...)
		}
		removed = append(removed, sub)
	}
	if removed == nil {
		return subs
	}
	se.mu.Lock()
	se.setSubs(kept)
	se.mu.Unlock()
	for _, gone := range removed {
		c.s.log.Warn("MQTT subscription no longer permitted removed on resume",
			"client_id", c.clientID, "user", c.user.Name(), "filter", gone.Filter, "share", gone.Share)
		if gone.Share != "" {
			continue // the group's binding stays for its other members
		}
		keep := false
		for _, o := range kept {
			keep = keep || (o.queue == gone.queue && o.key() == gone.key())
		}
		if !keep {
			if err := c.vh.UnbindQueue(gone.queue, c.s.cfg.Exchange, gone.key(), nil, nil); err != nil &&
				exchange.KindOf(err) != exchange.KindNotFound {
				c.s.log.Warn("unbind subscription", "client_id", c.clientID, "filter", gone.Filter, "err", err)
			}
		}
	}
	if err := c.persistSubs(); err != nil {
		c.s.log.Error("store session", "client_id", c.clientID, "err", err)
	}
	return kept
}
