package node

import (
	"errors"

	"github.com/trident-broker/trident/protocol/mqtt"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
	"github.com/trident-broker/trident/web"
)

// mqttView adapts the MQTT server's management views (protocol/mqtt
// admin.go) to web.MQTT. With MQTT disabled it lists nothing.
type mqttView struct{ n *Node }

var _ web.MQTT = mqttView{}

func (v mqttView) srv() *mqtt.Server {
	for _, f := range v.n.frontEnds {
		if m, ok := f.(*mqttFrontEnd); ok {
			return m.srv
		}
	}
	return nil
}

func webSession(i mqtt.SessionInfo) web.MQTTSession {
	se := web.MQTTSession{VHost: i.VHost, ClientID: i.ClientID, User: i.User, Connected: i.Connected,
		Connection: i.Connection, Persistent: i.Persistent, Expiry: i.Expiry, ExpiresAt: i.ExpiresAt,
		Queue: i.Queue, Queued: i.Queued, Unacked: i.Unacked}
	for _, s := range i.Subscriptions {
		se.Subscriptions = append(se.Subscriptions, web.MQTTSubscription(s))
	}
	return se
}

func (v mqttView) Clients() []web.MQTTClient {
	s := v.srv()
	if s == nil {
		return nil
	}
	var out []web.MQTTClient
	for _, c := range s.Clients() {
		out = append(out, web.MQTTClient{Connection: c.Name, Version: c.Version, Transport: c.Transport,
			Peer: c.Peer, Local: c.Local, ConnectedAt: c.ConnectedAt, Keepalive: c.Keepalive, CleanStart: c.CleanStart,
			Inflight: c.Inflight, RecvPublish: c.RecvPublish, SentPublish: c.SentPublish, RecvBytes: c.RecvBytes,
			SentBytes: c.SentBytes, Session: webSession(c.Session)})
	}
	return out
}

func (v mqttView) Sessions() []web.MQTTSession {
	s := v.srv()
	if s == nil {
		return nil
	}
	var out []web.MQTTSession
	for _, i := range s.Sessions() {
		out = append(out, webSession(i))
	}
	return out
}

func (v mqttView) Session(vhost, clientID string) (web.MQTTSession, bool) {
	s := v.srv()
	if s == nil {
		return web.MQTTSession{}, false
	}
	i, ok := s.Session(vhost, clientID)
	return webSession(i), ok
}

func (v mqttView) DisconnectClient(vhost, clientID string) bool {
	s := v.srv()
	return s != nil && s.DisconnectClient(vhost, clientID)
}

func (v mqttView) DeleteSession(vhost, clientID string) error {
	s := v.srv()
	if s == nil {
		return web.ErrMQTTNoSession
	}
	switch err := s.DeleteSession(vhost, clientID); {
	case errors.Is(err, mqtt.ErrNoSession):
		return web.ErrMQTTNoSession
	case errors.Is(err, mqtt.ErrSessionConnected):
		return web.ErrMQTTConnected
	default:
		return err
	}
}

func (v mqttView) BrowseRetained(q web.MQTTRetainedQuery) ([]web.MQTTRetained, int, error) {
	s := v.srv()
	if s == nil {
		return nil, 0, nil
	}
	items, n, err := s.BrowseRetained(mqtt.RetainedPage{VHosts: q.VHosts, Filter: q.Filter, AfterVHost: q.AfterVHost,
		AfterTopic: q.AfterTopic, Skip: q.Skip, Limit: q.Limit, Preview: q.Preview})
	if errors.Is(err, mqtt.ErrBadFilter) {
		return nil, 0, web.ErrMQTTBadFilter
	}
	out := make([]web.MQTTRetained, 0, len(items))
	for _, i := range items {
		out = append(out, web.MQTTRetained(i))
	}
	return out, n, err
}

func (v mqttView) ClearRetained(vhost, topic string) error {
	s := v.srv()
	if s == nil {
		return web.ErrMQTTNoRetained
	}
	found, err := s.ClearRetained(vhost, topic)
	switch {
	case errors.Is(err, mqtt.ErrBadFilter):
		return web.ErrMQTTBadFilter
	case err != nil:
		return err
	case !found:
		return web.ErrMQTTNoRetained
	}
	return nil
}

func (v mqttView) PublishTarget(topic string) (string, string) {
	ex := "amq.topic"
	if s := v.srv(); s != nil {
		ex = s.Exchange()
	}
	return ex, wire.TopicToKey(topic)
}
