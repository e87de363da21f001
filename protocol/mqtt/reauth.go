package mqtt

import (
	"errors"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/auth"
)

// MQTT 5 enhanced authentication with OAuth 2 tokens [MQTT-4.12], a
// Trident extension (RabbitMQ offers no authentication method and refuses
// a CONNECT naming one with 0x8C, as Trident does for any other method):
//
//   - CONNECT with Authentication Method TokenAuthMethod carries the
//     access token as its Authentication Data (no username or password
//     needed); it is validated in one step and CONNACK echoes the method.
//   - Re-authentication: AUTH with reason 0x19 and the same method carries
//     a fresh token for the same user; on success the server answers AUTH
//     0x00, the new token's scopes apply at once and the connection lives
//     until the new exp. A refused token ends the connection with
//     DISCONNECT 0x87 (not authorized).
//
// A client that logged in with the token as its password cannot
// re-authenticate (the specification allows AUTH only after a CONNECT
// with an Authentication Method); it reconnects with a new token.

// TokenAuthMethod is the MQTT 5 Authentication Method whose data is an
// OAuth 2 access token (JWT).
const TokenAuthMethod = "OAUTH2-JWT"

const (
	codeReauthenticate    byte = 0x19
	codeBadAuthMethod     byte = 0x8C
	authSuccessReasonCode byte = 0x00
)

// connectAuthMethod checks a CONNECT's Authentication Method and returns
// the token it carries; ok is false when the CONNECT was refused.
func (c *conn) connectAuthMethod(pk *packets.Packet) (token string, ok bool) {
	m := pk.Properties.AuthenticationMethod
	if m != TokenAuthMethod || !c.s.users.TokenLogins() {
		c.refuse(codeBadAuthMethod)
		return "", false
	}
	c.rareState().authMethod = m
	return string(pk.Properties.AuthenticationData), true
}

func (c *conn) handleAuth(pk *packets.Packet) error {
	if c.version != 5 || c.authMethod() == "" {
		return errProto(codeProtocolError, "AUTH without an authentication method in CONNECT")
	}
	if pk.ReasonCode != codeReauthenticate {
		return errProto(codeProtocolError, "AUTH reason code is not re-authenticate")
	}
	if pk.Properties.AuthenticationMethod != c.authMethod() {
		return errProto(codeProtocolError, "AUTH changes the authentication method")
	}
	if err := c.s.users.UpdateSecret(c.user, string(pk.Properties.AuthenticationData), c.nc.RemoteAddr()); err != nil {
		c.s.log.Warn("MQTT re-authentication refused", "client_id", c.clientID, "user", c.user.Name(), "err", err)
		return errProto(codeNotAuthorized, "re-authentication refused: "+reason(err))
	}
	if err := c.s.users.CheckVHost(c.user, c.vh.Name()); err != nil {
		return errProto(codeNotAuthorized, err.Error())
	}
	c.rare.expiry.Reset()
	c.sendPacket(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Auth}, ProtocolVersion: 5,
		ReasonCode: authSuccessReasonCode, Properties: packets.Properties{AuthenticationMethod: c.authMethod()}}, false)
	return nil
}

func reason(err error) string {
	if r := auth.TokenReason(err); r != "" {
		return r
	}
	if errors.Is(err, auth.ErrTooManyAttempts) {
		return "too many attempts"
	}
	return "bad credentials"
}
