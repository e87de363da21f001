package web

import (
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// ConnectionInfo describes one client connection, whatever its protocol.
type ConnectionInfo struct {
	Name             string
	Protocol         string // "AMQP 0-9-1", "MQTT 3.1.1", "STOMP 1.2", ...
	User             string
	VHost            string
	Peer             string // host:port
	Local            string // host:port
	Channels         int
	ConnectedAt      time.Time
	ClientProperties map[string]any
	FrameMax         uint32
	Heartbeat        time.Duration
	// Optional counters a front end may fill; rates are derived from them.
	RecvOct, SendOct     uint64
	Published, Delivered uint64
	// ChannelList details the channels, where the protocol has them; when
	// nil, Channels channels numbered 1..n are listed without details.
	ChannelList []ChannelInfo
}

// ChannelInfo describes one channel of a connection.
type ChannelInfo struct {
	Number              int
	Consumers           int
	Prefetch            int
	GlobalPrefetch      int
	Unacked             int
	Unconfirmed         int
	UncommittedMessages int
	UncommittedAcks     int
	Confirm             bool
	Transactional       bool
	// Message counters since the channel opened, for message_stats
	// (channels.go); zero where the protocol keeps none.
	Published, Confirmed      uint64
	Delivered, DeliveredNoAck uint64
	Got, GotNoAck, GetEmpty   uint64
	Redelivered, Acked        uint64
}

// Connections is what the API needs from the protocol front ends.
type Connections interface {
	ListConnections() []ConnectionInfo
	// CloseConnection closes the named connection with reason; false if
	// there is none.
	CloseConnection(name, reason string) bool
}

// ConnCounters is what the rate sampler reads of a connection every
// stats interval: its counters, and its channels where the protocol has
// them.
type ConnCounters struct {
	Name                                   string
	RecvOct, SendOct, Published, Delivered uint64
	ChannelList                            []ChannelInfo
}

// CounterSource may be implemented by a Connections to give the rate
// sampler each connection's counters without building its ConnectionInfo
// (client properties, addresses): the sampler reads every connection
// every stats interval, and this way an idle one costs it no allocation.
type CounterSource interface {
	// EachCounters calls fn for each open connection; fn must not keep
	// c beyond the call.
	EachCounters(fn func(c *ConnCounters))
}

// eachCounters calls fn for each of cs's connections, through
// CounterSource where cs has it.
func eachCounters(cs Connections, fn func(c *ConnCounters)) {
	if src, ok := cs.(CounterSource); ok {
		src.EachCounters(fn)
		return
	}
	for _, ci := range cs.ListConnections() {
		fn(&ConnCounters{Name: ci.Name, RecvOct: ci.RecvOct, SendOct: ci.SendOct, Published: ci.Published,
			Delivered: ci.Delivered, ChannelList: ci.ChannelList})
	}
}

type connectionJSON struct {
	Name             string         `json:"name"`
	Node             string         `json:"node"`
	Protocol         string         `json:"protocol"`
	User             string         `json:"user"`
	VHost            string         `json:"vhost"`
	PeerHost         string         `json:"peer_host"`
	PeerPort         int            `json:"peer_port"`
	Host             string         `json:"host"`
	Port             int            `json:"port"`
	Channels         int            `json:"channels"`
	ConnectedAt      int64          `json:"connected_at"`
	ClientProperties map[string]any `json:"client_properties"`
	FrameMax         uint32         `json:"frame_max"`
	Timeout          int            `json:"timeout"`
	State            string         `json:"state"`
	Type             string         `json:"type"`
	SSL              bool           `json:"ssl"`
	AuthMechanism    string         `json:"auth_mechanism"`
	UserWhoPerformed string         `json:"user_who_performed_action"`
	RecvOct          uint64         `json:"recv_oct"`
	RecvOctDetails   details        `json:"recv_oct_details"`
	SendOct          uint64         `json:"send_oct"`
	SendOctDetails   details        `json:"send_oct_details"`
	MessageStats     *msgStatsJSON  `json:"message_stats,omitempty"`
}

// connectionJSON renders a connection with RabbitMQ's field names.
func (s *Server) connectionJSON(c ConnectionInfo) connectionJSON {
	peerHost, peerPort := splitHostPort(c.Peer)
	host, port := splitHostPort(c.Local)
	props := c.ClientProperties
	if props == nil {
		props = map[string]any{}
	}
	w := s.rates.conn(c.Name)
	j := connectionJSON{
		Name: c.Name, Node: s.node, Protocol: c.Protocol, User: c.User, VHost: c.VHost,
		PeerHost: peerHost, PeerPort: peerPort, Host: host, Port: port, Channels: c.Channels,
		ConnectedAt: c.ConnectedAt.UnixMilli(), ClientProperties: props, FrameMax: c.FrameMax,
		Timeout: int(c.Heartbeat / time.Second), State: "running", Type: "network",
		AuthMechanism: "PLAIN", UserWhoPerformed: c.User,
		RecvOct: c.RecvOct, RecvOctDetails: w.details(func(s *sample) float64 { return float64(s.recv) }),
		SendOct: c.SendOct, SendOctDetails: w.details(func(s *sample) float64 { return float64(s.send) }),
	}
	if c.Published > 0 || c.Delivered > 0 {
		var m msgStatsJSON
		m.Publish, m.PublishDetails = counter(c.Published, w, func(s *sample) uint64 { return s.s.Publish })
		m.Deliver, m.DeliverDetails = counter(c.Delivered, w, func(s *sample) uint64 { return s.s.Deliver })
		j.MessageStats = &m
	}
	return j
}

// seesConnection: administrators and monitoring users see every
// connection, others their own.
func (s *Server) seesConnection(u *auth.User, c ConnectionInfo) bool {
	return isMonitor(u) || c.User == u.Name()
}

func (s *Server) visibleConnections(u *auth.User, vhost string) []ConnectionInfo {
	var out []ConnectionInfo
	if s.conns == nil {
		return nil
	}
	for _, c := range s.conns.ListConnections() {
		if s.seesConnection(u, c) && (vhost == "" || c.VHost == vhost) {
			out = append(out, c)
		}
	}
	return out
}

func connName(c ConnectionInfo) string  { return c.Name }
func connVHost(c ConnectionInfo) string { return c.VHost }

func (s *Server) listConnections(w http.ResponseWriter, r *http.Request, u *auth.User) {
	respondList(w, r, listSpec[ConnectionInfo, connectionJSON]{refs: s.visibleConnections(u, ""),
		name: connName, build: s.connectionJSON})
}

func (s *Server) listVHostConnections(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	respondList(w, r, listSpec[ConnectionInfo, connectionJSON]{refs: s.visibleConnections(u, v.Name()),
		name: connName, build: s.connectionJSON})
}

func (s *Server) findConnection(r *http.Request) (ConnectionInfo, bool) {
	name := pathValue(r, "name")
	if n, err := url.PathUnescape(name); err == nil {
		name = n
	}
	if s.conns == nil {
		return ConnectionInfo{}, false
	}
	for _, c := range s.conns.ListConnections() {
		if c.Name == name {
			return c, true
		}
	}
	return ConnectionInfo{}, false
}

func (s *Server) getConnection(w http.ResponseWriter, r *http.Request, u *auth.User) {
	c, ok := s.findConnection(r)
	if !ok || !s.seesConnection(u, c) {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.connectionJSON(c))
}

// closeConnection closes a connection (AMQP clients get 320
// CONNECTION_FORCED with the X-Reason header's text). Administrators close
// any; others only their own.
func (s *Server) closeConnection(w http.ResponseWriter, r *http.Request, u *auth.User) {
	c, ok := s.findConnection(r)
	if !ok || !(isAdmin(u) || c.User == u.Name()) {
		if ok && isMonitor(u) {
			writeError(w, http.StatusUnauthorized, "not_authorised", "Not administrator user")
			return
		}
		notFound(w)
		return
	}
	reason := r.Header.Get("X-Reason")
	if reason == "" {
		reason = "Closed via management plugin"
	}
	if !s.conns.CloseConnection(c.Name, reason) {
		notFound(w)
		return
	}
	s.log.Info("connection closed via the API", "connection", c.Name, "by", u.Name(), "reason", reason)
	w.WriteHeader(http.StatusNoContent)
}

// --- consumers ---

type consumerJSON struct {
	ConsumerTag    string         `json:"consumer_tag"`
	Queue          map[string]any `json:"queue"`
	ChannelDetails map[string]any `json:"channel_details"`
	AckRequired    bool           `json:"ack_required"`
	Exclusive      bool           `json:"exclusive"`
	PrefetchCount  int            `json:"prefetch_count"`
	Active         bool           `json:"active"`
	ActivityStatus string         `json:"activity_status"`
	Arguments      map[string]any `json:"arguments"`
	Priority       int            `json:"-"`
}

func consumersOf(q *exchange.Queue) []consumerJSON {
	out := []consumerJSON{}
	for _, c := range q.Consumers() {
		args := map[string]any{}
		if c.Priority != 0 {
			args["x-priority"] = c.Priority
		}
		// RabbitMQ's activity_status: up, or for a member of a
		// single-active group single_active or waiting.
		status := "up"
		if !c.Active {
			status = "waiting"
		} else if c.SingleActive {
			status = "single_active"
		}
		out = append(out, consumerJSON{ConsumerTag: c.Tag, Queue: map[string]any{"name": q.Name(), "vhost": q.VHost()},
			ChannelDetails: map[string]any{}, AckRequired: c.AckRequired, Exclusive: c.Exclusive,
			PrefetchCount: c.Prefetch, Active: c.Active, ActivityStatus: status, Arguments: args})
	}
	return out
}

func (s *Server) consumersIn(vs []*exchange.VHost) []consumerJSON {
	out := []consumerJSON{}
	for _, v := range vs {
		qs := v.Queues()
		sort.Slice(qs, func(i, j int) bool { return qs[i].Name() < qs[j].Name() })
		for _, q := range qs {
			if q.Status().Consumers > 0 {
				out = append(out, consumersOf(q)...)
			}
		}
	}
	return out
}

func (s *Server) listConsumers(w http.ResponseWriter, r *http.Request, u *auth.User) {
	writeJSON(w, http.StatusOK, s.consumersIn(s.visibleVHosts(u)))
}

func (s *Server) listVHostConsumers(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.consumersIn([]*exchange.VHost{v}))
}
