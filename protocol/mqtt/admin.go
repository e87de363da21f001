package mqtt

import (
	"container/heap"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// Read-only views of the front end's clients, sessions and retained
// messages for the management API (the node adapts them to web's types),
// and the three operator actions: disconnect a client, remove an offline
// session, clear a retained topic. Each action takes the path the
// protocol itself takes (DISCONNECT 0x98, a session's expiry, an empty
// retained PUBLISH), so memory, the store and a cluster see the same.

// Errors of the operator actions.
var (
	// ErrNoSession: no session of that client id in that vhost here.
	ErrNoSession = errors.New("mqtt: no such session")
	// ErrSessionConnected: the session has a connection; disconnect it
	// first.
	ErrSessionConnected = errors.New("mqtt: session is connected")
)

// SubscriptionInfo is one topic filter of a session.
type SubscriptionInfo struct {
	Filter string // without $share/group/
	Share  string // shared subscription group, "" if none
	QoS    byte
	// MQTT 5 subscription options.
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte
	ID                int // subscription identifier, 0 none
}

// SessionInfo describes a session, connected or not.
type SessionInfo struct {
	VHost, ClientID string
	User            string // its owner
	Connected       bool
	Connection      string // the connection's name while connected
	Persistent      bool   // outlives its connection (clean session false, expiry > 0)
	// Expiry is the session expiry interval in seconds (0xFFFFFFFF:
	// never); ExpiresAt, for a disconnected persistent session that
	// expires, when it will.
	Expiry    uint32
	ExpiresAt time.Time
	// Queue is the session's queue; Queued its ready messages, Unacked
	// those delivered and not yet acknowledged.
	Queue           string
	Queued, Unacked int
	Subscriptions   []SubscriptionInfo
}

// ClientInfo is a connected client: its connection and its session.
type ClientInfo struct {
	ConnInfo
	Session SessionInfo
}

// Exchange is the topic exchange MQTT publishes to.
func (s *Server) Exchange() string { return s.cfg.Exchange }

// Clients lists the connected clients, sorted by connection name.
func (s *Server) Clients() []ClientInfo {
	conns := s.conns.Snapshot()
	out := make([]ClientInfo, 0, len(conns))
	for _, c := range conns {
		i, ok := c.info()
		if !ok || c.se == nil {
			continue
		}
		out = append(out, ClientInfo{ConnInfo: i, Session: s.sessionInfo(c.se)})
	}
	slices.SortFunc(out, func(a, b ClientInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Sessions lists the sessions this node holds, connected ones and
// disconnected persistent ones, and in a cluster those of nodes that are
// down (orphan.go), sorted by vhost and client id.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	ses := make([]*session, 0, len(s.sessions))
	for _, se := range s.sessions {
		ses = append(ses, se)
	}
	s.mu.Unlock()
	out := s.orphanInfos() // sessions of nodes that are down, none of them here
	out = slices.Grow(out, len(ses))
	for _, se := range ses {
		i := s.sessionInfo(se)
		if i.Connected || i.Persistent {
			out = append(out, i)
		}
	}
	slices.SortFunc(out, func(a, b SessionInfo) int {
		if c := strings.Compare(a.VHost, b.VHost); c != 0 {
			return c
		}
		return strings.Compare(a.ClientID, b.ClientID)
	})
	return out
}

// Session describes the session of clientID in vhost.
func (s *Server) Session(vhost, clientID string) (SessionInfo, bool) {
	s.mu.Lock()
	se := s.sessions[vhost+"\x00"+clientID]
	s.mu.Unlock()
	if se == nil {
		// A session of a node that is down, listed by Sessions.
		return s.orphanInfo(vhost + "\x00" + clientID)
	}
	i := s.sessionInfo(se)
	return i, i.Connected || i.Persistent
}

func (s *Server) sessionInfo(se *session) SessionInfo {
	se.mu.Lock()
	i := SessionInfo{VHost: se.vhost(), ClientID: se.clientID(), User: se.user, Persistent: se.persistent && !se.ended,
		Expiry: se.expiry, Queue: se.qname}
	if se.owner != nil {
		i.Connected, i.Connection = true, se.owner.connName()
	} else if at := se.expiresAtLocked(); se.expiry != expiryNever && at != 0 {
		i.ExpiresAt = time.Unix(0, at)
	}
	se.mu.Unlock()
	for _, sub := range se.subList() {
		i.Subscriptions = append(i.Subscriptions, SubscriptionInfo{Filter: sub.Filter, Share: sub.Share, QoS: sub.QoS,
			NoLocal: sub.NoLocal, RetainAsPublished: sub.RAP, RetainHandling: sub.Handling, ID: sub.ID})
	}
	if vh, ok := s.b.VHost(se.vhost()); ok {
		if q, err := vh.Queue(se.qname, nil); err == nil {
			st := q.Status()
			i.Queued, i.Unacked = st.Ready, st.Unacked
		}
	}
	return i
}

// DisconnectClient disconnects the connected client clientID of vhost
// as CloseConnection does (MQTT 5: DISCONNECT 0x98 administrative
// action); false if it is not connected here.
func (s *Server) DisconnectClient(vhost, clientID string) bool {
	s.mu.Lock()
	se := s.sessions[vhost+"\x00"+clientID]
	s.mu.Unlock()
	if se == nil {
		return false
	}
	se.mu.Lock()
	c := se.owner
	se.mu.Unlock()
	if c == nil {
		return false
	}
	c.serverDisconnect(codeAdministrativeAction)
	return true
}

// DeleteSession ends the disconnected session of clientID in vhost as
// its expiry would: its queue and its record go. In a cluster, a session
// that another node took meanwhile is not this node's to end.
func (s *Server) DeleteSession(vhost, clientID string) error {
	key := vhost + "\x00" + clientID
	s.mu.Lock()
	se := s.sessions[key]
	s.mu.Unlock()
	if se == nil {
		return s.deleteOrphan(key) // a session of a node that is down
	}
	if !s.stillHere(se) {
		return ErrNoSession
	}
	s.mu.Lock()
	if s.sessions[key] != se {
		s.mu.Unlock()
		return ErrNoSession
	}
	se.mu.Lock()
	switch {
	case se.owner != nil:
		se.mu.Unlock()
		s.mu.Unlock()
		return ErrSessionConnected
	case se.ended || !se.persistent:
		se.mu.Unlock()
		s.mu.Unlock()
		return ErrNoSession
	}
	se.ended = true
	se.stopExpiryLocked()
	se.mu.Unlock()
	delete(s.sessions, se.key)
	s.mu.Unlock()
	s.dropSession(se)
	return nil
}

// RetainedInfo describes a retained message.
type RetainedInfo struct {
	VHost, Topic string
	QoS          byte
	Size         int    // payload bytes
	Preview      []byte // the payload's first bytes (at most the preview asked for)
	ContentType  string // MQTT 5 content type, "" none
	StoredAt     time.Time
	ExpiresAt    time.Time // zero: never
}

// RetainedPage asks for a page of retained messages: those of VHosts
// (every vhost that has some when empty) whose topic matches Filter
// ("#" when empty), in (vhost, topic) order, after the (AfterVHost,
// AfterTopic) cursor when it is set, Skip of them left out, at most
// Limit given with Preview bytes of payload each.
type RetainedPage struct {
	VHosts                 []string
	Filter                 string
	AfterVHost, AfterTopic string
	Skip, Limit, Preview   int
}

// MaxRetainedWindow bounds Skip+Limit: the browse keeps that many topics
// in memory while it walks the index, whatever the number matched.
const MaxRetainedWindow = 100_000

// ErrBadFilter: the filter is not a valid MQTT topic filter.
var ErrBadFilter = errors.New("mqtt: invalid topic filter")

// BrowseRetained returns a page of live retained messages and how many
// match in all. The index is walked once under its read lock, keeping
// only the Skip+Limit first topics (a bounded heap); the page's bodies
// are then read from the store, one at a time, without the lock.
func (s *Server) BrowseRetained(p RetainedPage) ([]RetainedInfo, int, error) {
	if p.Filter == "" {
		p.Filter = "#"
	}
	if !wire.ValidFilter(p.Filter) {
		return nil, 0, ErrBadFilter
	}
	window := min(p.Skip+p.Limit, MaxRetainedWindow)
	now := time.Now().Unix()
	h := &topicHeap{}
	matched := 0
	r := s.retained
	r.mu.RLock()
	st := r.st
	vhosts := p.VHosts
	if len(vhosts) == 0 {
		for vh := range r.m {
			vhosts = append(vhosts, vh)
		}
	}
	for _, vh := range vhosts {
		x := r.m[vh]
		if x == nil || (p.AfterVHost != "" && vh < p.AfterVHost) {
			continue
		}
		cursor := p.AfterVHost != "" && vh == p.AfterVHost
		x.match(p.Filter, func(topic []byte, ref retainedRef) {
			if !ref.live(now) || (cursor && string(topic) <= p.AfterTopic) {
				return
			}
			matched++
			if window == 0 {
				return
			}
			if h.Len() < window {
				heap.Push(h, vhTopic{vh, string(topic)})
			} else if top := (*h)[0]; vh < top.vh || (vh == top.vh && string(topic) < top.topic) {
				(*h)[0] = vhTopic{vh, string(topic)}
				heap.Fix(h, 0)
			}
		})
	}
	r.mu.RUnlock()
	sorted := make([]vhTopic, h.Len())
	for i := len(sorted) - 1; i >= 0; i-- {
		sorted[i] = heap.Pop(h).(vhTopic)
	}
	if p.Skip >= len(sorted) {
		return []RetainedInfo{}, matched, nil
	}
	out := make([]RetainedInfo, 0, len(sorted)-p.Skip)
	for _, t := range sorted[p.Skip:] {
		val, found, err := getMeta(st, retainedKey(t.vh, t.topic))
		if err != nil {
			return nil, matched, err
		}
		if !found {
			continue // cleared since the walk
		}
		msg, err := decodeRetained(val)
		if err != nil {
			continue
		}
		i := RetainedInfo{VHost: t.vh, Topic: t.topic, QoS: msg.QoS, Size: len(msg.Payload),
			Preview: msg.Payload[:min(len(msg.Payload), max(p.Preview, 0))], ContentType: msg.Props.ContentType}
		if msg.StoredAt > 0 {
			i.StoredAt = time.UnixMilli(msg.StoredAt)
		}
		if msg.ExpiresAt > 0 {
			i.ExpiresAt = time.Unix(msg.ExpiresAt, 0)
		}
		out = append(out, i)
	}
	return out, matched, nil
}

// ClearRetained clears the retained message of topic in vhost as an
// empty retained PUBLISH does (through the store, replicated in a
// cluster); false if there was none.
func (s *Server) ClearRetained(vhost, topic string) (bool, error) {
	if !wire.ValidTopic(topic) {
		return false, ErrBadFilter
	}
	r := s.retained
	r.mu.RLock()
	_, ok := r.m[vhost].getRef(topic)
	r.mu.RUnlock()
	if !ok {
		return false, nil
	}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true}, TopicName: topic}
	return true, r.put(s.shared, vhost, &pk)
}

// getRef is get on a possibly nil index.
func (x *retainedIndex) getRef(topic string) (retainedRef, bool) {
	if x == nil {
		return retainedRef{}, false
	}
	return x.get(topic)
}

type vhTopic struct{ vh, topic string }

// topicHeap is a max-heap of (vhost, topic): its top is the last kept.
type topicHeap []vhTopic

func (h topicHeap) Len() int { return len(h) }
func (h topicHeap) Less(i, j int) bool {
	if h[i].vh != h[j].vh {
		return h[i].vh > h[j].vh
	}
	return h[i].topic > h[j].topic
}
func (h topicHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *topicHeap) Push(x any)   { *h = append(*h, x.(vhTopic)) }
func (h *topicHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
