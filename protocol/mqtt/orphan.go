package mqtt

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"
)

// Sessions of a node that is down. A persistent session's expiry timer
// runs on the node that last held it (session.go); when that node is
// down (not among Config.LiveNodes), the session still expires: every
// node indexes the records of the sessions last held elsewhere (from
// ApplyMeta), notes when it first saw each of their nodes down, and the
// first live node in name order that runs MQTT expires those whose time
// has come.
//
//   - When: the record's Off (when its last connection ended, written at
//     every disconnect in a cluster) plus the expiry interval; a record
//     whose connection was still open when its node went (Off 0) counts
//     from the moment this node saw the node down. 3.1.1 sessions never
//     expire (as standalone): they are indexed only to be listed, found
//     and deleted.
//   - How: after a barrier the record is read again and must still be the
//     one indexed, its node still down. The node then claims the session
//     as a connection would (its record written back naming this node,
//     Gen+1, so that a client resuming it elsewhere at the same moment is
//     ordered against it as in any takeover, cluster.go) and ends it as
//     its own expiry timer would: queue and record deleted.
//   - While its node is down such a session is listed by every live
//     node's Sessions, with the time it expires, found by Session and
//     ended by DeleteSession (the management API) on any of them.
//
// The node that comes back finds the record gone, or (if it came back
// first) its own record and expires the session itself.

// orphanSweep is how often the index is looked through.
const orphanSweep = time.Second

// orphans is the index of sessions last held on other nodes.
type orphans struct {
	mu        sync.Mutex
	recs      map[string]*sessionRecord // session key → its record
	downSince map[string]time.Time      // node → when first seen down
	running   map[string]bool           // keys being expired here
	stop      chan struct{}
	done      chan struct{}
}

func newOrphans() *orphans {
	return &orphans{recs: map[string]*sessionRecord{}, downSince: map[string]time.Time{}, running: map[string]bool{}}
}

// indexRecord notes (rec nil: forgets) the record of session key.
func (s *Server) indexRecord(key string, rec *sessionRecord) {
	o := s.orphans
	o.mu.Lock()
	defer o.mu.Unlock()
	if rec == nil || s.ownRecord(rec) {
		delete(o.recs, key)
		return
	}
	o.recs[key] = rec
}

// forgetPrefix drops the index's records under a key prefix.
func (s *Server) forgetPrefix(prefix string) {
	o := s.orphans
	o.mu.Lock()
	defer o.mu.Unlock()
	for key := range o.recs {
		if strings.HasPrefix(sessionPrefix+key, prefix) {
			delete(o.recs, key)
		}
	}
}

// reindex reads every session record of another node from the store.
func (s *Server) reindex() error {
	return s.st.LoadMeta(sessionPrefix, func(key string, val []byte) error {
		var rec sessionRecord
		if json.Unmarshal(val, &rec) == nil {
			s.indexRecord(strings.TrimPrefix(key, sessionPrefix), &rec)
		}
		return nil
	})
}

// orphanDue is when a session of a node seen down since down expires.
func orphanDue(rec *sessionRecord, down time.Time) time.Time {
	from := down
	if rec.Off > 0 {
		from = time.UnixMilli(rec.Off)
	}
	return from.Add(time.Duration(rec.Expiry) * time.Second)
}

// startOrphans starts the sweep, in a cluster that tells who is alive.
func (s *Server) startOrphans() {
	if !s.clustered() || s.cfg.LiveNodes == nil {
		return
	}
	o := s.orphans
	o.stop, o.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(o.done)
		t := time.NewTicker(orphanSweep)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.expireOrphans(s.sweepOrphans(time.Now()))
			case <-o.stop:
				return
			}
		}
	}()
}

func (s *Server) stopOrphans() {
	if o := s.orphans; o.stop != nil {
		close(o.stop)
		<-o.done
	}
}

// sweepOrphans updates when nodes were first seen down and returns the
// sessions this node is to expire now (marked running).
func (s *Server) sweepOrphans(now time.Time) []string {
	var live []string
	first := ""
	for _, n := range s.cfg.LiveNodes() {
		live = append(live, n.Name)
		if n.MQTT && (first == "" || n.Name < first) {
			first = n.Name
		}
	}
	if !slices.Contains(live, s.cfg.NodeName) {
		return nil // this node's own view is not to be trusted
	}
	expirer := first == s.cfg.NodeName
	o := s.orphans
	o.mu.Lock()
	defer o.mu.Unlock()
	for node := range o.downSince {
		if slices.Contains(live, node) {
			delete(o.downSince, node)
		}
	}
	var due []string
	for key, rec := range o.recs {
		if slices.Contains(live, rec.Node) {
			continue
		}
		down, ok := o.downSince[rec.Node]
		if !ok {
			down = now
			o.downSince[rec.Node] = now
		}
		if expirer && !o.running[key] && rec.Expiry != expiryNever && !now.Before(orphanDue(rec, down)) {
			o.running[key] = true
			due = append(due, key)
		}
	}
	return due
}

// expireOrphans expires the sessions keys after one barrier (every
// record committed before it applied here), until Shutdown.
func (s *Server) expireOrphans(keys []string) {
	if len(keys) == 0 {
		return
	}
	err := s.barrier()
	if err != nil {
		s.log.Warn("expire sessions of a node that is down", "sessions", len(keys), "err", err)
	}
	for _, key := range keys {
		select {
		case <-s.orphans.stop:
			err = ErrServerClosed
		default:
		}
		if err == nil {
			s.expireOrphan(key)
		}
		s.orphans.mu.Lock()
		delete(s.orphans.running, key)
		s.orphans.mu.Unlock()
	}
}

// nodeDown reports whether node is not among the live nodes.
func (s *Server) nodeDown(node string) bool {
	if s.cfg.LiveNodes == nil {
		return false
	}
	for _, n := range s.cfg.LiveNodes() {
		if n.Name == node {
			return false
		}
	}
	return true
}

// expireOrphan claims and ends the session key of a node that is down,
// if its record (read after a barrier) is still the one indexed; false if
// it did not.
func (s *Server) expireOrphan(key string) bool {
	o := s.orphans
	o.mu.Lock()
	want := o.recs[key]
	o.mu.Unlock()
	if want == nil {
		return false
	}
	rec, err := s.loadRecord(key)
	if err != nil || rec == nil || rec.Node != want.Node || rec.Gen != want.Gen || !s.nodeDown(rec.Node) {
		return false
	}
	vh, id, _ := strings.Cut(key, "\x00")
	s.mu.Lock()
	if s.shutdown || s.sessions[key] != nil {
		s.mu.Unlock()
		return false
	}
	se := s.sessionFromRecord(vh, id, rec)
	se.gen = rec.Gen + 1 // the claim supersedes the record of the node that is down
	s.sessions[key] = se
	s.mu.Unlock()
	if err := s.saveSession(se); err != nil {
		s.log.Warn("expire session of a node that is down: claim", "client_id", id, "err", err)
		s.mu.Lock()
		if s.sessions[key] == se {
			delete(s.sessions, key)
		}
		s.mu.Unlock()
		return false
	}
	s.log.Info("MQTT session ended for a node that is down", "client_id", id, "vhost", vh, "node", rec.Node)
	s.expireSession(se)
	return true
}

// orphanInfo describes the session key of a node that is down, ok false
// if the index holds no such session (or a connection here holds it).
func (s *Server) orphanInfo(key string) (SessionInfo, bool) {
	for _, i := range s.orphanInfos(key) {
		return i, true
	}
	return SessionInfo{}, false
}

// deleteOrphan ends the session key of a node that is down, as its expiry
// would (claimed, queue and record deleted): the management API's delete
// on a live node. ErrNoSession if it is not such a session.
func (s *Server) deleteOrphan(key string) error {
	o := s.orphans
	o.mu.Lock()
	rec := o.recs[key]
	_, down := o.downSince[nodeOf(rec)]
	busy := o.running[key]
	if rec != nil && down && !busy {
		o.running[key] = true
	}
	o.mu.Unlock()
	if rec == nil || !down || busy {
		return ErrNoSession
	}
	defer func() {
		o.mu.Lock()
		delete(o.running, key)
		o.mu.Unlock()
	}()
	if err := s.barrier(); err != nil {
		return err
	}
	if !s.expireOrphan(key) {
		return ErrNoSession
	}
	return nil
}

func nodeOf(rec *sessionRecord) string {
	if rec == nil {
		return ""
	}
	return rec.Node
}

// orphanInfos describes the sessions of nodes that are down that no
// connection here holds, for Sessions (only keys, if any are given).
func (s *Server) orphanInfos(keys ...string) []SessionInfo {
	o := s.orphans
	type orphan struct {
		key  string
		rec  *sessionRecord
		down time.Time
	}
	var l []orphan
	o.mu.Lock()
	for key, rec := range o.recs {
		if len(keys) > 0 && !slices.Contains(keys, key) {
			continue
		}
		if down, ok := o.downSince[rec.Node]; ok {
			l = append(l, orphan{key, rec, down})
		}
	}
	o.mu.Unlock()
	var out []SessionInfo
	for _, e := range l {
		s.mu.Lock()
		here := s.sessions[e.key] != nil
		s.mu.Unlock()
		if here {
			continue
		}
		vh, id, _ := strings.Cut(e.key, "\x00")
		se := newSession(vh, id)
		i := SessionInfo{VHost: vh, ClientID: id, User: e.rec.User, Persistent: true, Expiry: e.rec.Expiry, Queue: se.qname}
		if e.rec.Expiry != expiryNever {
			i.ExpiresAt = orphanDue(e.rec, e.down)
		}
		for _, sub := range e.rec.Subs {
			i.Subscriptions = append(i.Subscriptions, SubscriptionInfo{Filter: sub.Filter, Share: sub.Share, QoS: sub.QoS,
				NoLocal: sub.NoLocal, RetainAsPublished: sub.RAP, RetainHandling: sub.Handling, ID: sub.ID})
		}
		if v, ok := s.b.VHost(vh); ok {
			if q, err := v.Queue(se.qname, nil); err == nil {
				st := q.Status()
				i.Queued, i.Unacked = st.Ready, st.Unacked
			}
		}
		out = append(out, i)
	}
	return out
}
