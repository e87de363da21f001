package mqtt

import (
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// will is a connection's will message.
type will struct {
	pk    packets.Packet // as a PUBLISH
	delay time.Duration  // MQTT 5 will delay interval
}

func newWill(pk *packets.Packet, c *conn) *will {
	w := &will{pk: packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: pk.Connect.WillQos, Retain: pk.Connect.WillRetain},
		TopicName:       pk.Connect.WillTopic,
		Payload:         pk.Connect.WillPayload,
		ProtocolVersion: c.version,
	}}
	if c.version == 5 {
		wp := pk.Connect.WillProperties
		w.pk.Properties = packets.Properties{PayloadFormat: wp.PayloadFormat, PayloadFormatFlag: wp.PayloadFormatFlag,
			ContentType: wp.ContentType, ResponseTopic: wp.ResponseTopic, CorrelationData: wp.CorrelationData,
			User: wp.User, MessageExpiryInterval: wp.MessageExpiryInterval}
		w.delay = time.Duration(wp.WillDelayInterval) * time.Second
	}
	return w
}

// checkWill checks at CONNECT that the client may publish its will, as
// RabbitMQ does: write on the MQTT exchange and the topic permission on
// the will topic. It runs before the session is taken over, so a refused
// CONNECT leaves a connected session alone.
func (c *conn) checkWill(topic string) error {
	if !wire.ValidTopic(topic) {
		return errProto(codeTopicNameInvalid, "invalid will topic")
	}
	if err := c.s.users.Check(c.user, c.vh.Name(), auth.Write, "exchange", c.s.cfg.Exchange); err != nil {
		return err
	}
	return c.checkTopic(auth.Write, topic, false)
}

// scheduleWill publishes c's will now, or after its delay unless the
// session resumes first; a session that ends sends it at once, as the will
// delay ends with the session [MQTT-3.1.3-9].
func (s *Server) scheduleWill(se *session, w *will, sessionEnded bool) {
	if w.delay <= 0 || sessionEnded {
		s.publishWill(se, w)
		return
	}
	se.mu.Lock()
	if se.moved {
		// Resumed on another node before the delay [MQTT-3.1.3-9].
		se.mu.Unlock()
		return
	}
	d := w.delay
	if se.expiry != expiryNever && time.Duration(se.expiry)*time.Second < d {
		d = time.Duration(se.expiry) * time.Second
	}
	r := se.rareLocked()
	if r.willTimer != nil {
		r.willTimer.Stop()
	}
	r.willTimer = time.AfterFunc(d, func() {
		se.mu.Lock()
		r.willTimer = nil
		owned := se.owner != nil
		se.mu.Unlock()
		if !owned {
			s.publishWill(se, w)
		}
	})
	se.mu.Unlock()
}

// publishWill routes the will into the core like a PUBLISH from the
// client (retained if asked), without waiting for the store.
func (s *Server) publishWill(se *session, w *will) {
	vh, ok := s.b.VHost(se.vhost())
	if !ok {
		return
	}
	pk := w.pk
	if pk.FixedHeader.Retain {
		if err := s.retained.put(s.shared, se.vhost(), &pk); err != nil {
			s.log.Warn("retain will", "client_id", se.clientID(), "err", err)
		}
	}
	c := &conn{s: s, version: pk.ProtocolVersion, clientID: se.clientID()}
	m := c.toMessage(&pk, nil, nil, s.cfg.Exchange, wire.TopicToKey(pk.TopicName))
	if _, err := vh.Publish(m, exchange.PublishOpts{}); err != nil {
		s.log.Warn("publish will", "client_id", se.clientID(), "err", err)
	}
}
