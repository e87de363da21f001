package web

import (
	"fmt"
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// Channels are listed as RabbitMQ names them, "<connection> (<n>)", with
// the details a front end gives (AMQP's; others report only a count).
// A channel with details carries RabbitMQ's message_stats: its counters
// since it opened (publish, confirm, deliver, deliver_no_ack, get,
// get_no_ack, get_empty, deliver_get, redeliver, ack) with *_details.rate,
// the change between the sampler's two newest readings (rates.go).
type channelJSON struct {
	Name                   string         `json:"name"`
	Number                 int            `json:"number"`
	Node                   string         `json:"node"`
	User                   string         `json:"user"`
	VHost                  string         `json:"vhost"`
	State                  string         `json:"state"`
	ConnectionDetails      map[string]any `json:"connection_details"`
	ConsumerCount          int            `json:"consumer_count"`
	PrefetchCount          int            `json:"prefetch_count"`
	GlobalPrefetchCount    int            `json:"global_prefetch_count"`
	MessagesUnacknowledged int            `json:"messages_unacknowledged"`
	MessagesUnconfirmed    int            `json:"messages_unconfirmed"`
	MessagesUncommitted    int            `json:"messages_uncommitted"`
	AcksUncommitted        int            `json:"acks_uncommitted"`
	Confirm                bool           `json:"confirm"`
	Transactional          bool           `json:"transactional"`
	IdleSince              string         `json:"idle_since,omitempty"`
	MessageStats           *msgStatsJSON  `json:"message_stats,omitempty"`
}

// channelName is RabbitMQ's name of channel n of connection conn.
func channelName(conn string, n int) string { return fmt.Sprintf("%s (%d)", conn, n) }

// chanMsgStats are a channel's counters as the core's MsgStats (what the
// sampler keeps) and its confirms, which only channels have.
func chanMsgStats(ci ChannelInfo) (exchange.MsgStats, uint64) {
	return exchange.MsgStats{Publish: ci.Published, Deliver: ci.Delivered, DeliverNoAck: ci.DeliveredNoAck,
		Get: ci.Got, GetNoAck: ci.GotNoAck, GetEmpty: ci.GetEmpty, Ack: ci.Acked, Redeliver: ci.Redelivered}, ci.Confirmed
}

// channelStats renders ci's message_stats with rates from w.
func channelStats(ci ChannelInfo, w window) *msgStatsJSON {
	cur, confirmed := chanMsgStats(ci)
	m := messageStats(kindChannel, cur, w)
	m.Confirm, m.ConfirmDetails = counter(confirmed, w, func(s *sample) uint64 { return s.confirm })
	return &m
}

func (s *Server) channelsOf(cs []ConnectionInfo) []channelJSON {
	out := []channelJSON{}
	for _, c := range cs {
		ph, pp := splitHostPort(c.Peer)
		list := c.ChannelList
		detailed := list != nil
		if !detailed {
			for i := 1; i <= c.Channels; i++ {
				list = append(list, ChannelInfo{Number: i})
			}
		}
		for _, ci := range list {
			j := channelJSON{Name: channelName(c.Name, ci.Number), Number: ci.Number, Node: s.node,
				User: c.User, VHost: c.VHost, State: "running",
				ConnectionDetails: map[string]any{"name": c.Name, "peer_host": ph, "peer_port": pp},
				ConsumerCount:     ci.Consumers, PrefetchCount: ci.Prefetch, GlobalPrefetchCount: ci.GlobalPrefetch,
				MessagesUnacknowledged: ci.Unacked, MessagesUnconfirmed: ci.Unconfirmed,
				MessagesUncommitted: ci.UncommittedMessages, AcksUncommitted: ci.UncommittedAcks,
				Confirm: ci.Confirm, Transactional: ci.Transactional}
			if detailed {
				j.MessageStats = channelStats(ci, s.rates.channel(c.Name, ci.Number))
			}
			out = append(out, j)
		}
	}
	return out
}

func chName(c channelJSON) string  { return c.Name }
func chVHost(c channelJSON) string { return c.VHost }
func chSelf(c channelJSON) channelJSON {
	return c
}

func (s *Server) listChannels(w http.ResponseWriter, r *http.Request, u *auth.User) {
	respondList(w, r, listSpec[channelJSON, channelJSON]{refs: s.channelsOf(s.visibleConnections(u, "")),
		name: chName, build: chSelf})
}

func (s *Server) listVHostChannels(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	respondList(w, r, listSpec[channelJSON, channelJSON]{refs: s.channelsOf(s.visibleConnections(u, v.Name())),
		name: chName, build: chSelf})
}

func (s *Server) connectionChannels(w http.ResponseWriter, r *http.Request, u *auth.User) {
	c, ok := s.findConnection(r)
	if !ok || !s.seesConnection(u, c) {
		notFound(w)
		return
	}
	respondList(w, r, listSpec[channelJSON, channelJSON]{refs: s.channelsOf([]ConnectionInfo{c}),
		name: chName, build: chSelf})
}

func (s *Server) getChannel(w http.ResponseWriter, r *http.Request, u *auth.User) {
	name := pathValue(r, "name")
	for _, ch := range s.channelsOf(s.visibleConnections(u, "")) {
		if ch.Name == name {
			writeJSON(w, http.StatusOK, ch)
			return
		}
	}
	notFound(w)
}
