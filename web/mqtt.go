package web

import (
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/trident-broker/trident/auth"
)

// The MQTT fleet (our extension; RabbitMQ has no such API, EMQX's
// dashboard has the idea): connected clients with their sessions and
// subscriptions, sessions including disconnected persistent ones with
// their queued messages, and the retained messages, browsable by topic
// filter. Lists page and filter as list.go does (the name filter matches
// the client id); retained messages are always paged, walked from the
// retained index with a bounded window.
//
// Who sees what, as for connections: monitoring and administrator users
// see every client and session, others those of their own user; retained
// messages are seen by who sees the vhost. Disconnecting a client or
// removing a session takes an administrator or the client's own user;
// clearing a retained topic takes an administrator or a user who may
// publish to it (write on the MQTT exchange and the topic permission).

// MQTTSubscription is a topic filter of a session.
type MQTTSubscription struct {
	Filter            string
	Share             string // shared subscription group, "" if none
	QoS               byte
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte
	ID                int // subscription identifier, 0 none
}

// MQTTSession describes an MQTT session, connected or not.
type MQTTSession struct {
	VHost, ClientID, User string
	Connected             bool
	Connection            string // connection name while connected
	Persistent            bool
	Expiry                uint32    // seconds, 0xFFFFFFFF never
	ExpiresAt             time.Time // disconnected and expiring: when
	Queue                 string
	Queued, Unacked       int
	Subscriptions         []MQTTSubscription
}

// MQTTClient is a connected MQTT client.
type MQTTClient struct {
	Connection  string // its connection's name (/api/connections/{name})
	Version     byte   // 3 (3.1), 4 (3.1.1) or 5
	Transport   string // "tcp" or "websocket"
	Peer, Local string
	ConnectedAt time.Time
	Keepalive   time.Duration
	CleanStart  bool
	Inflight    int
	// Counters since it connected.
	RecvPublish, SentPublish uint64
	RecvBytes, SentBytes     uint64
	Session                  MQTTSession
}

// MQTTRetained is a retained message.
type MQTTRetained struct {
	VHost, Topic string
	QoS          byte
	Size         int
	Preview      []byte
	ContentType  string
	StoredAt     time.Time // zero: unknown (stored before it was recorded)
	ExpiresAt    time.Time // zero: never
}

// MQTTRetainedQuery asks for a page of retained messages (see
// MQTT.BrowseRetained).
type MQTTRetainedQuery struct {
	VHosts                 []string // the vhosts to look in
	Filter                 string   // MQTT topic filter
	AfterVHost, AfterTopic string   // cursor: only what sorts after it
	Skip, Limit, Preview   int
}

// Errors an MQTT implementation returns.
var (
	ErrMQTTNoSession   = errors.New("web: no such MQTT session")
	ErrMQTTConnected   = errors.New("web: the MQTT session is connected")
	ErrMQTTBadFilter   = errors.New("web: invalid MQTT topic filter")
	ErrMQTTNoRetained  = errors.New("web: no retained message")
	errMQTTUnavailable = errors.New("MQTT is not enabled")
)

// MQTT is what the API needs from the MQTT front end.
type MQTT interface {
	Clients() []MQTTClient
	Sessions() []MQTTSession
	Session(vhost, clientID string) (MQTTSession, bool)
	// DisconnectClient disconnects a connected client (MQTT 5:
	// DISCONNECT 0x98); false if it is not connected.
	DisconnectClient(vhost, clientID string) bool
	// DeleteSession removes a disconnected session (ErrMQTTNoSession,
	// ErrMQTTConnected).
	DeleteSession(vhost, clientID string) error
	// BrowseRetained returns a page of the live retained messages the
	// query selects (VHosts empty: every vhost), sorted by vhost and topic, and how many it matches
	// in all (ErrMQTTBadFilter).
	BrowseRetained(q MQTTRetainedQuery) ([]MQTTRetained, int, error)
	// ClearRetained clears a topic's retained message as an empty
	// retained PUBLISH does (ErrMQTTNoRetained, ErrMQTTBadFilter).
	ClearRetained(vhost, topic string) error
	// PublishTarget is the exchange and routing key a PUBLISH to topic
	// goes to, for the permission check.
	PublishTarget(topic string) (exchange, key string)
}

func (s *Server) mqttRoutes(m func(string, access, handler), mg access) {
	m("GET /api/mqtt/clients", mg, s.listMQTTClients)
	m("GET /api/mqtt/clients/{vhost}", mg, s.listMQTTClients)
	m("GET /api/mqtt/clients/{vhost}/{clientid}", mg, s.getMQTTClient)
	m("DELETE /api/mqtt/clients/{vhost}/{clientid}", mg, s.disconnectMQTTClient)
	m("GET /api/mqtt/sessions", mg, s.listMQTTSessions)
	m("GET /api/mqtt/sessions/{vhost}", mg, s.listMQTTSessions)
	m("GET /api/mqtt/sessions/{vhost}/{clientid}", mg, s.getMQTTSession)
	m("DELETE /api/mqtt/sessions/{vhost}/{clientid}", mg, s.deleteMQTTSession)
	m("GET /api/mqtt/retained", mg, s.listMQTTRetained)
	m("DELETE /api/mqtt/retained/{vhost}", mg, s.clearMQTTRetained)
}

// mqttOn answers 404 (MQTT disabled) when there is no MQTT front end.
func (s *Server) mqttOn(w http.ResponseWriter) bool {
	if s.mqtt == nil {
		writeError(w, http.StatusNotFound, "not_found", errMQTTUnavailable.Error())
		return false
	}
	return true
}

// seesMQTT: administrators and monitoring users see every client and
// session, others those of their own user.
func seesMQTT(u *auth.User, owner string) bool { return isMonitor(u) || owner == u.Name() }

// mayCloseMQTT: administrators close any client or session, others their
// own; a monitoring user that may not is told so, others see nothing.
func mayCloseMQTT(w http.ResponseWriter, u *auth.User, owner string) bool {
	if isAdmin(u) || owner == u.Name() {
		return true
	}
	if isMonitor(u) {
		writeError(w, http.StatusUnauthorized, "not_authorised", "Not administrator user")
		return false
	}
	notFound(w)
	return false
}

type mqttSubscriptionJSON struct {
	TopicFilter       string `json:"topic_filter"`
	ShareGroup        string `json:"share_group,omitempty"`
	QoS               byte   `json:"qos"`
	NoLocal           bool   `json:"no_local"`
	RetainAsPublished bool   `json:"retain_as_published"`
	RetainHandling    byte   `json:"retain_handling"`
	SubscriptionID    int    `json:"subscription_identifier,omitempty"`
}

type mqttSessionJSON struct {
	Node          string                 `json:"node"`
	VHost         string                 `json:"vhost"`
	ClientID      string                 `json:"client_id"`
	User          string                 `json:"user"`
	Connected     bool                   `json:"connected"`
	Connection    string                 `json:"connection,omitempty"`
	Persistent    bool                   `json:"persistent"`
	Expiry        uint32                 `json:"session_expiry_interval"`
	ExpiryNever   bool                   `json:"session_expiry_never"`
	ExpiresAt     *int64                 `json:"expires_at"`
	Queue         string                 `json:"queue"`
	Queued        int                    `json:"queued"`
	Unacked       int                    `json:"unacked"`
	Subscriptions int                    `json:"subscriptions"`
	SubList       []mqttSubscriptionJSON `json:"subscription_list,omitempty"`
}

type mqttClientJSON struct {
	mqttSessionJSON
	Name            string `json:"name"` // the connection's
	ProtocolVersion string `json:"protocol_version"`
	Protocol        string `json:"protocol"`
	Transport       string `json:"transport"`
	Keepalive       int    `json:"keepalive"`
	CleanSession    bool   `json:"clean_session"`
	PeerHost        string `json:"peer_host"`
	PeerPort        int    `json:"peer_port"`
	ConnectedAt     int64  `json:"connected_at"`
	Inflight        int    `json:"inflight"`
	PublishIn       uint64 `json:"publish_in"`
	PublishOut      uint64 `json:"publish_out"`
	RecvOct         uint64 `json:"recv_oct"`
	SendOct         uint64 `json:"send_oct"`
}

func msTime(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	ms := t.UnixMilli()
	return &ms
}

const mqttExpiryNever = 0xFFFFFFFF

func (s *Server) mqttSessionJSON(se MQTTSession, subs bool) mqttSessionJSON {
	j := mqttSessionJSON{Node: s.node, VHost: se.VHost, ClientID: se.ClientID, User: se.User, Connected: se.Connected,
		Connection: se.Connection, Persistent: se.Persistent, Expiry: se.Expiry, ExpiryNever: se.Expiry == mqttExpiryNever,
		ExpiresAt: msTime(se.ExpiresAt), Queue: se.Queue, Queued: se.Queued, Unacked: se.Unacked,
		Subscriptions: len(se.Subscriptions)}
	if subs {
		j.SubList = []mqttSubscriptionJSON{}
		for _, sub := range se.Subscriptions {
			j.SubList = append(j.SubList, mqttSubscriptionJSON{TopicFilter: sub.Filter, ShareGroup: sub.Share, QoS: sub.QoS,
				NoLocal: sub.NoLocal, RetainAsPublished: sub.RetainAsPublished, RetainHandling: sub.RetainHandling,
				SubscriptionID: sub.ID})
		}
	}
	return j
}

// mqttVersionName is the MQTT version's name as the specifications give it.
func mqttVersionName(v byte) string {
	switch v {
	case 3:
		return "3.1"
	case 5:
		return "5"
	}
	return "3.1.1"
}

func (s *Server) mqttClientJSON(c MQTTClient, subs bool) mqttClientJSON {
	host, port := splitHostPort(c.Peer)
	proto := "MQTT " + mqttVersionName(c.Version)
	if c.Transport == "websocket" {
		proto = "Web " + proto
	}
	return mqttClientJSON{mqttSessionJSON: s.mqttSessionJSON(c.Session, subs), Name: c.Connection,
		ProtocolVersion: mqttVersionName(c.Version), Protocol: proto, Transport: c.Transport,
		Keepalive: int(c.Keepalive / time.Second), CleanSession: c.CleanStart, PeerHost: host, PeerPort: port,
		ConnectedAt: c.ConnectedAt.UnixMilli(), Inflight: c.Inflight, PublishIn: c.RecvPublish, PublishOut: c.SentPublish,
		RecvOct: c.RecvBytes, SendOct: c.SentBytes}
}

// mqttVHostParam resolves an optional {vhost} for reading: "" for all.
func (s *Server) mqttVHostParam(w http.ResponseWriter, r *http.Request, u *auth.User) (string, bool) {
	if r.PathValue("vhost") == "" {
		return "", true
	}
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return "", false
	}
	return v.Name(), true
}

func (s *Server) listMQTTClients(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if !s.mqttOn(w) {
		return
	}
	vhost, ok := s.mqttVHostParam(w, r, u)
	if !ok {
		return
	}
	var refs []MQTTClient
	for _, c := range s.mqtt.Clients() {
		if seesMQTT(u, c.Session.User) && (vhost == "" || c.Session.VHost == vhost) {
			refs = append(refs, c)
		}
	}
	respondList(w, r, listSpec[MQTTClient, mqttClientJSON]{refs: refs,
		vhost: func(c MQTTClient) string { return c.Session.VHost },
		name:  func(c MQTTClient) string { return c.Session.ClientID },
		build: func(c MQTTClient) mqttClientJSON { return s.mqttClientJSON(c, false) }})
}

// findMQTTClient finds the connected client {clientid} of {vhost}.
func (s *Server) findMQTTClient(r *http.Request) (MQTTClient, bool) {
	vhost, id := pathValue(r, "vhost"), pathValue(r, "clientid")
	for _, c := range s.mqtt.Clients() {
		if c.Session.VHost == vhost && c.Session.ClientID == id {
			return c, true
		}
	}
	return MQTTClient{}, false
}

func (s *Server) getMQTTClient(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if !s.mqttOn(w) {
		return
	}
	c, ok := s.findMQTTClient(r)
	if !ok || !seesMQTT(u, c.Session.User) {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.mqttClientJSON(c, true))
}

func (s *Server) disconnectMQTTClient(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if !s.mqttOn(w) {
		return
	}
	c, ok := s.findMQTTClient(r)
	if !ok {
		notFound(w)
		return
	}
	if !mayCloseMQTT(w, u, c.Session.User) {
		return
	}
	if !s.mqtt.DisconnectClient(c.Session.VHost, c.Session.ClientID) {
		notFound(w)
		return
	}
	s.log.Info("MQTT client disconnected via the API", "vhost", c.Session.VHost, "client_id", c.Session.ClientID, "by", u.Name())
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listMQTTSessions(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if !s.mqttOn(w) {
		return
	}
	vhost, ok := s.mqttVHostParam(w, r, u)
	if !ok {
		return
	}
	var refs []MQTTSession
	for _, se := range s.mqtt.Sessions() {
		if seesMQTT(u, se.User) && (vhost == "" || se.VHost == vhost) {
			refs = append(refs, se)
		}
	}
	respondList(w, r, listSpec[MQTTSession, mqttSessionJSON]{refs: refs,
		vhost: func(se MQTTSession) string { return se.VHost },
		name:  func(se MQTTSession) string { return se.ClientID },
		build: func(se MQTTSession) mqttSessionJSON { return s.mqttSessionJSON(se, false) }})
}

func (s *Server) getMQTTSession(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if !s.mqttOn(w) {
		return
	}
	se, ok := s.mqtt.Session(pathValue(r, "vhost"), pathValue(r, "clientid"))
	if !ok || !seesMQTT(u, se.User) {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.mqttSessionJSON(se, true))
}

func (s *Server) deleteMQTTSession(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if !s.mqttOn(w) {
		return
	}
	se, ok := s.mqtt.Session(pathValue(r, "vhost"), pathValue(r, "clientid"))
	if !ok {
		notFound(w)
		return
	}
	if !mayCloseMQTT(w, u, se.User) {
		return
	}
	switch err := s.mqtt.DeleteSession(se.VHost, se.ClientID); {
	case errors.Is(err, ErrMQTTConnected):
		writeError(w, http.StatusConflict, "conflict", "The session's client is connected: disconnect it first")
		return
	case errors.Is(err, ErrMQTTNoSession):
		notFound(w)
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_server_error", err.Error())
		return
	}
	s.log.Info("MQTT session removed via the API", "vhost", se.VHost, "client_id", se.ClientID, "by", u.Name())
	w.WriteHeader(http.StatusNoContent)
}

// Retained message browsing bounds.
const (
	defaultMQTTPreview = 256
	maxMQTTPreview     = 4096
	// maxRetainedWindow bounds page × page_size: the browse keeps that
	// many topics while it walks the index; deeper pages take the
	// after/after_vhost cursor.
	maxRetainedWindow = 100_000
)

type mqttRetainedJSON struct {
	VHost           string `json:"vhost"`
	Topic           string `json:"topic"`
	QoS             byte   `json:"qos"`
	PayloadBytes    int    `json:"payload_bytes"`
	Payload         string `json:"payload"`
	PayloadEncoding string `json:"payload_encoding"` // "string" or "base64"
	Truncated       bool   `json:"payload_truncated"`
	ContentType     string `json:"content_type,omitempty"`
	StoredAt        *int64 `json:"stored_at"`
	ExpiresAt       *int64 `json:"expires_at"`
}

type mqttRetainedPageJSON struct {
	pageJSON[mqttRetainedJSON]
	// Next is the cursor of the next page (after_vhost, after), nil on
	// the last page.
	Next *mqttCursorJSON `json:"next,omitempty"`
}

type mqttCursorJSON struct {
	VHost string `json:"after_vhost"`
	Topic string `json:"after"`
}

// previewJSON renders a payload's preview: as text when it is UTF-8 (a
// rune cut by the bound is left out), else base64.
func previewJSON(p []byte, size int) (text, enc string, truncated bool) {
	truncated = len(p) < size
	t := p
	if truncated {
		for i := 0; i < utf8.UTFMax-1 && len(t) > 0 && !utf8.Valid(t); i++ {
			t = t[:len(t)-1]
		}
	}
	if utf8.Valid(t) {
		return string(t), "string", truncated
	}
	return base64.StdEncoding.EncodeToString(p), "base64", truncated
}

func intParam(r *http.Request, key string, def int) (int, bool) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

func (s *Server) listMQTTRetained(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if !s.mqttOn(w) {
		return
	}
	q := r.URL.Query()
	page, ok1 := intParam(r, "page", 1)
	size, ok2 := intParam(r, "page_size", defaultPageSize)
	preview, ok3 := intParam(r, "preview", defaultMQTTPreview)
	if !ok1 || !ok2 || !ok3 || page < 1 || size < 1 || size > maxPageSize || page*size > maxRetainedWindow ||
		preview < 0 || preview > maxMQTTPreview {
		writeError(w, http.StatusBadRequest, "invalid_pagination_parameters",
			"Invalid parameters: page >= 1, 1 <= page_size <= 500, page × page_size <= 100000, 0 <= preview <= 4096")
		return
	}
	query := MQTTRetainedQuery{Filter: q.Get("topic"), AfterVHost: q.Get("after_vhost"), AfterTopic: q.Get("after"),
		Skip: (page - 1) * size, Limit: size, Preview: preview}
	if vh := q.Get("vhost"); vh != "" {
		if !s.seesVHost(u, vh) {
			noVHostAccess(w)
			return
		}
		if _, ok := s.core.VHost(vh); !ok {
			notFound(w)
			return
		}
		query.VHosts = []string{vh}
	} else {
		for _, v := range s.visibleVHosts(u) {
			query.VHosts = append(query.VHosts, v.Name())
		}
	}
	if query.AfterTopic != "" && query.AfterVHost == "" && len(query.VHosts) == 1 {
		query.AfterVHost = query.VHosts[0]
	}
	slices.Sort(query.VHosts)
	var items []MQTTRetained
	var matched int
	var err error
	if len(query.VHosts) > 0 { // none visible: nothing (an empty list is every vhost to BrowseRetained)
		items, matched, err = s.mqtt.BrowseRetained(query)
	}
	switch {
	case errors.Is(err, ErrMQTTBadFilter):
		badRequest(w, "topic is not a valid MQTT topic filter")
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_server_error", err.Error())
		return
	}
	out := mqttRetainedPageJSON{pageJSON: pageJSON[mqttRetainedJSON]{Items: make([]mqttRetainedJSON, 0, len(items)),
		Page: page, PageSize: size, PageCount: max(1, (matched+size-1)/size), FilteredCount: matched,
		ItemCount: len(items), TotalCount: matched}}
	for _, m := range items {
		text, enc, trunc := previewJSON(m.Preview, m.Size)
		out.Items = append(out.Items, mqttRetainedJSON{VHost: m.VHost, Topic: m.Topic, QoS: m.QoS, PayloadBytes: m.Size,
			Payload: text, PayloadEncoding: enc, Truncated: trunc, ContentType: m.ContentType,
			StoredAt: msTime(m.StoredAt), ExpiresAt: msTime(m.ExpiresAt)})
	}
	if n := len(items); n > 0 && query.Skip+n < matched {
		last := items[n-1]
		out.Next = &mqttCursorJSON{VHost: last.VHost, Topic: last.Topic}
	}
	writeJSON(w, http.StatusOK, out)
}

// clearMQTTRetained clears ?topic='s retained message in {vhost}.
func (s *Server) clearMQTTRetained(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if !s.mqttOn(w) {
		return
	}
	topic := r.URL.Query().Get("topic")
	if topic == "" {
		badRequest(w, "the topic query parameter is required")
		return
	}
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	ex, key := s.mqtt.PublishTarget(topic)
	if !isAdmin(u) {
		// As an empty retained PUBLISH of the user would be checked.
		if err := s.users.Check(u, v.Name(), auth.Write, "exchange", ex); err != nil {
			accessRefused(w)
			return
		}
		if err := s.permitsTopic(u, v, auth.Write, ex, key); err != nil {
			accessRefused(w)
			return
		}
	}
	switch err := s.mqtt.ClearRetained(v.Name(), topic); {
	case errors.Is(err, ErrMQTTNoRetained):
		notFound(w)
		return
	case errors.Is(err, ErrMQTTBadFilter):
		badRequest(w, "topic is not a valid MQTT topic name")
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_server_error", err.Error())
		return
	}
	s.log.Info("MQTT retained message cleared via the API", "vhost", v.Name(), "topic", topic, "by", u.Name())
	w.WriteHeader(http.StatusNoContent)
}
