package mqtt

import (
	"bytes"
	"errors"
	"strings"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// handleConnect authenticates the client, takes over or creates its
// session, answers CONNACK and resumes the session's subscriptions.
func (c *conn) handleConnect(pk *packets.Packet) error {
	v := pk.ProtocolVersion
	c.version = v
	if code := pk.ConnectValidate(); code != packets.CodeSuccess {
		if code == packets.ErrProtocolViolationProtocolVersion && (bytes.Equal(pk.Connect.ProtocolName, []byte("MQTT")) || bytes.Equal(pk.Connect.ProtocolName, []byte("MQIsdp"))) {
			if v != 5 {
				c.version = 4
			}
			c.refuse(codeUnsupportedVersion)
			return code
		}
		if code == packets.ErrProtocolViolationProtocolName {
			return code // not MQTT: just close
		}
		c.refuse(code.Code)
		return code
	}
	c.accepted = true
	c.s.log.Info("connection accepted", "peer", c.peer(), "transport", c.transport(),
		"client_id", pk.Connect.ClientIdentifier, "version", v)
	c.cleanStart = pk.Connect.Clean
	c.kaSecs = pk.Connect.Keepalive
	// The server keep-alive is a ceiling, as Mosquitto's max_keepalive:
	// an MQTT 5 client asking for none or a longer one is told to use it
	// (Server Keep Alive in CONNACK) and held to it.
	var serverKeepAlive uint16
	if k := c.s.cfg.ServerKeepAlive; k > 0 && v == 5 && (pk.Connect.Keepalive == 0 || pk.Connect.Keepalive > k) {
		serverKeepAlive = k
		c.kaSecs = k
	}
	// The minimum is a floor (mqtt.min_keep_alive): an MQTT 5 client
	// asking for none or a shorter one is told to use it; an MQTT 3.1.1
	// client, which cannot be told, is refused (server unavailable).
	if k := c.s.cfg.MinKeepAlive; k > 0 && (pk.Connect.Keepalive == 0 || pk.Connect.Keepalive < k) {
		if v != 5 {
			c.refuse(codeServerUnavailable)
			return errKeepAliveTooShort
		}
		serverKeepAlive = k
		c.kaSecs = k
	}
	if v == 5 {
		c.maxOut = pk.Properties.MaximumPacketSize
		c.aliasMax = pk.Properties.TopicAliasMaximum
		if c.aliasMax > 0 {
			// Made here, before any delivery: the writer reads
			// rare.outAliases only when aliasMax is set.
			c.rareState()
		}
		rm := c.s.cfg.ReceiveMaximum
		if pk.Properties.ReceiveMaximum > 0 && pk.Properties.ReceiveMaximum < rm {
			rm = pk.Properties.ReceiveMaximum
		}
		c.limit.SetMax(int(rm))
	} else {
		c.limit.SetMax(int(c.s.cfg.ReceiveMaximum))
	}

	// Authentication and vhost.
	vhost, userName := c.s.cfg.DefaultVHost, ""
	pass := string(pk.Connect.Password)
	certUser := c.certLoginUser(pk) // see certlogin.go
	tokenOnly := false
	if v == 5 && pk.Properties.AuthenticationMethod != "" {
		// Enhanced authentication: an OAuth 2 token (reauth.go).
		tok, ok := c.connectAuthMethod(pk)
		if !ok {
			return errProto(codeBadAuthMethod, "unsupported authentication method "+pk.Properties.AuthenticationMethod)
		}
		certUser, pass, userName, tokenOnly = "", tok, "token", true
		if pk.Connect.UsernameFlag {
			vhost, _ = c.s.splitUsername(string(pk.Connect.Username))
		}
	} else if pk.Connect.UsernameFlag {
		vhost, userName = c.s.splitUsername(string(pk.Connect.Username))
	} else if certUser != "" {
		userName = certUser
	} else if v == 5 && pk.Connect.PasswordFlag && c.s.users.TokenLogins() {
		// MQTT 5 allows a password without a user name: an OAuth 2
		// token, whose user name is its own.
		userName = "token"
	} else if c.s.cfg.AllowAnonymous && !pk.Connect.PasswordFlag {
		userName, pass = c.s.cfg.AnonUser, c.s.cfg.AnonPass
	}
	if userName == "" {
		// RabbitMQ answers a CONNECT without credentials (anonymous
		// access off) with "bad user name or password".
		c.refuse(codeBadUserOrPassword)
		return errProto(codeBadUserOrPassword, "no credentials provided and anonymous access is off")
	}
	// Refused before its user is known, the connection is named in the
	// log by the user name CONNECT gave (who).
	refused := func() { c.rareState().loginName = userName }
	var u *auth.User
	var err error
	if tokenOnly {
		u, err = c.s.users.AuthenticateToken(pass, c.nc.RemoteAddr())
	} else if certUser != "" {
		u, err = c.s.users.AuthenticateCert(certUser, c.nc.RemoteAddr())
	} else {
		u, err = c.s.users.Authenticate(userName, pass, c.nc.RemoteAddr())
	}
	if err != nil {
		code := codeBadUserOrPassword
		if errors.Is(err, auth.ErrLoopbackOnly) {
			code = codeNotAuthorized
		}
		// auth logs a refused password or token; a certificate's user
		// is logged here.
		c.refusalLogged = certUser == ""
		refused()
		c.refuse(code)
		return err
	}
	vh, ok := c.s.b.VHost(vhost)
	if !ok || c.s.users.CheckVHost(u, vhost) != nil {
		refused()
		c.refuse(codeNotAuthorized)
		return errProto(codeNotAuthorized, "access to vhost '"+vhost+"' refused for user '"+userName+"'")
	}
	if err := c.openLimited(u, vh); err != nil {
		refused()
		return err
	}

	// Client identifier.
	// Cloned: the decoder's strings are views of the CONNECT packet, which
	// (its password too) would stay in memory for the connection's life.
	id := strings.Clone(pk.Connect.ClientIdentifier)
	assigned := false
	if id == "" {
		if v != 5 && !c.cleanStart {
			c.refuse(codeClientIDNotValid)
			return errProto(codeClientIDNotValid, "empty client id with a persistent session")
		}
		id, assigned = "trident-"+exchangeToken(), true
	}
	c.clientID = id
	if pk.Connect.WillFlag {
		if err := c.checkWill(pk.Connect.WillTopic); err != nil {
			code := codeNotAuthorized
			var pe *protoError
			if errors.As(err, &pe) {
				code = pe.code
			}
			c.refuse(code)
			return err
		}
	}

	// A session that is or may become persistent needs the latest
	// record of its client id, in a cluster (cluster.go).
	latest := !c.cleanStart || (v == 5 && pk.Properties.SessionExpiryInterval > 0)
	se, present, claim, err := c.takeSession(vhost, id, u.Name(), latest)
	if err != nil {
		code := codeServerUnavailable
		if errors.Is(err, errSessionOwned) {
			// Another user's connection holds the client id: refused,
			// so that one user cannot disconnect another (owner.go).
			code = codeNotAuthorized
			c.s.log.Warn("connection refused", append(c.who(), "code", hexCode(code),
				"err", "client id in use by another user's connection")...)
			c.refusalLogged = true
		}
		c.refuse(code)
		return err
	}
	c.se = se
	c.clientID = se.clientID() // the same string, kept once
	if claim {
		// The session was last held on another node: the claim makes
		// that node let go of it (cluster.go).
		if err := c.s.saveSession(se); err != nil {
			c.refuse(codeServerUnavailable)
			return err
		}
	}
	present = present && !c.cleanStart
	c.setSessionMode(pk)
	if err := c.prepareSession(); err != nil {
		c.refuse(codeServerUnavailable)
		return err
	}
	if pk.Connect.WillFlag {
		c.rareState().will = newWill(pk, c)
	}

	ack := controlPacket(packets.Connack)
	ack.ProtocolVersion, ack.SessionPresent = v, present
	if v == 5 {
		p := &ack.Properties
		p.ReceiveMaximum = c.s.cfg.ReceiveMaximum
		p.TopicAliasMaximum = c.s.cfg.TopicAliasMaximum
		p.ServerKeepAlive = serverKeepAlive
		p.ServerKeepAliveFlag = serverKeepAlive > 0
		p.MaximumPacketSize = uint32(c.s.cfg.MaxPacketSize)
		if assigned {
			p.AssignedClientID = id
		}
		p.SharedSubAvailable, p.SharedSubAvailableFlag = 1, true
		p.SubIDAvailable, p.SubIDAvailableFlag = 1, true
		p.WildcardSubAvailable, p.WildcardSubAvailableFlag = 1, true
		p.RetainAvailable, p.RetainAvailableFlag = 1, true
		p.AuthenticationMethod = c.authMethod()
	}
	if !u.Expiry().IsZero() {
		// Made before the connection is connected, when management
		// may read c.rare (transport): the watch goes into it below.
		c.rareState()
	}
	c.connected.Store(true)
	c.sendPooled(ack)
	c.s.giveBack.noteConnected()
	c.s.log.Info("connection authenticated", c.who()...)
	c.connEvent(true, "")
	// As RabbitMQ: when the token expires, MQTT 5 clients get DISCONNECT
	// 0xA0 (maximum connect time), 3.1.1 clients are disconnected.
	if w := auth.WatchExpiry(u, func() {
		c.s.log.Warn("MQTT disconnecting client: credential expired", "client_id", c.clientID, "user", u.Name())
		c.serverDisconnect(codeMaximumConnectTime)
	}); w != nil {
		c.rare.expiry = w
	}
	c.resume()
	return nil
}

// refuse answers CONNACK with a failure and closes after it.
func (c *conn) refuse(code byte) {
	ack := &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ProtocolVersion: c.version}
	if c.version == 5 {
		ack.ReasonCode = code
	} else {
		ack.ReasonCode = connackV3(code)
	}
	c.closing.Store(true)
	c.refusedCode = code
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.sendPacket(ack, true)
}

// takeSession claims the session of client id, disconnecting a connection
// that holds it (session takeover) and waiting for it to let go. In a
// cluster the stored record is read first (after a barrier if latest,
// so that it is the last one committed): a session last held on another
// node is resumed from it, and claim reports that the record must be
// written back to take it from that node.
//
// A session belongs to the user who created it (owner.go): another user
// never takes it over. While its owner is connected the newcomer is
// refused (errSessionOwned); otherwise the owner's session is discarded
// and the newcomer starts a fresh one.
func (c *conn) takeSession(vhost, id, user string, latest bool) (_ *session, present, claim bool, _ error) {
	s := c.s
	key := vhost + "\x00" + id
	var rec *sessionRecord
	if s.clustered() {
		if latest {
			if err := s.barrier(); err != nil {
				return nil, false, false, err
			}
		}
		var err error
		if rec, err = s.loadRecord(key); err != nil {
			return nil, false, false, err
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var nextGen uint64
	for {
		s.mu.Lock()
		if s.shutdown {
			s.mu.Unlock()
			return nil, false, false, ErrServerClosed
		}
		se := s.sessions[key]
		if se != nil {
			se.mu.Lock()
			d := se.dropping
			se.mu.Unlock()
			if d != nil {
				// The client's previous session ended a moment ago and
				// is still being removed: the new one starts after.
				s.mu.Unlock()
				select {
				case <-d:
				case <-time.After(time.Until(deadline)):
					return nil, false, false, errProto(codeServerUnavailable, "previous session still ending")
				}
				continue
			}
		}
		if rec != nil && s.staleLocked(se, rec) {
			se = s.sessionFromRecord(vhost, id, rec)
			s.sessions[key] = se
			claim = !s.ownRecord(rec)
			se.elsewhere = claim && rec.Off == 0 && !s.nodeDown(rec.Node)
		}
		if se != nil {
			// s.mu is released when foreign says so.
			owned, gen, err := s.foreignLocked(se, user)
			if err != nil {
				return nil, false, false, err
			}
			if owned {
				// The other user's session is gone: the next round
				// starts a fresh one, neither from memory nor from
				// the record; its Gen follows the discarded one's, so
				// that in a cluster the new record supersedes it.
				rec, claim, nextGen = nil, false, gen
				continue
			}
		}
		present := se != nil
		if se == nil {
			se = newSession(vhost, id)
			se.gen = nextGen
			s.sessions[se.key] = se
		}
		se.mu.Lock()
		se.user = user
		if old := se.owner; old != nil {
			gone := &old.left
			se.mu.Unlock()
			s.mu.Unlock()
			old.serverDisconnect(codeSessionTakenOver)
			select {
			case <-gone.C():
			case <-time.After(time.Until(deadline)):
				return nil, false, false, errProto(codeServerUnavailable, "session takeover timed out")
			}
			continue
		}
		se.owner = c
		se.elsewhere = false
		se.gen++
		se.stopExpiryLocked()
		se.stopWillLocked() // [MQTT-3.1.3-9]: the delayed will is not sent
		se.mu.Unlock()
		s.mu.Unlock()
		return se, present, claim, nil
	}
}

// setSessionMode applies clean start and the session expiry interval.
func (c *conn) setSessionMode(pk *packets.Packet) {
	se := c.se
	if c.cleanStart {
		se.mu.Lock()
		was := se.persistent || len(se.subList()) > 0
		se.mu.Unlock()
		if was {
			c.s.dropSession(se)
		}
		se.mu.Lock()
		se.setSubs(nil)
		clear(se.qos2InMap())
		se.setRelOut(nil)
		se.mu.Unlock()
	}
	se.mu.Lock()
	if c.version == 5 {
		se.expiry = pk.Properties.SessionExpiryInterval
	} else if c.cleanStart {
		se.expiry = 0
	} else {
		se.expiry = expiryNever
	}
	se.persistent = se.expiry > 0
	se.mu.Unlock()
}

// prepareSession stores a persistent session's record.
func (c *conn) prepareSession() error {
	se := c.se
	se.mu.Lock()
	p := se.persistent
	se.mu.Unlock()
	if p {
		return c.s.saveSession(se)
	}
	return c.s.deleteSessionRecord(se.key)
}

// deleteSessionRecord deletes the stored record of session key, if the
// store holds one: a clean session's CONNECT ends a persistent session
// of its client id. Looking first spares every other clean-session
// CONNECT a durable write (an fsync, or in a cluster a replicated one).
func (s *Server) deleteSessionRecord(key string) error {
	k := sessionPrefix + key
	found := false
	if err := s.st.LoadMeta(k, func(got string, _ []byte) error {
		found = found || got == k
		return nil
	}); err != nil {
		return err
	}
	if !found {
		return nil
	}
	return s.shared.DeleteMeta(k)
}

// resume re-establishes a resumed session's subscriptions that the user
// may still have and resends PUBREL for outbound QoS 2 messages awaiting
// PUBCOMP.
func (c *conn) resume() {
	se := c.se
	se.mu.Lock()
	rel := se.relOutList()
	se.setRelOut(nil)
	se.mu.Unlock()
	if len(rel) > 0 {
		c.infMu.Lock()
		for _, pid := range rel {
			c.inflight.set(pid, inflight{released: true})
		}
		c.infMu.Unlock()
		for _, pid := range rel {
			c.sendAck(packets.Pubrel, pid, 0)
		}
	}
	// Subscriptions the user may no longer have go before any is
	// consumed (owner.go).
	for _, sub := range c.recheckSubs() {
		if sub.NoLocal {
			c.noLocal.Store(true)
		}
		if err := c.bindAndConsume(sub); err != nil {
			c.s.log.Warn("resume subscription", "client_id", c.clientID, "filter", sub.Filter, "err", err)
		}
	}
}

func exchangeToken() string {
	// A server-assigned client id: unique and short.
	return randomID()
}

var _ exchange.Sink = (*conn)(nil)
