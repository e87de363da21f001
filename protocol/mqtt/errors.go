package mqtt

import (
	"errors"

	"github.com/mochi-mqtt/server/v2/packets"
)

// MQTT 5 reason codes the front end sends.
const (
	codeSuccess               byte = 0x00
	codeNoMatchingSubscribers byte = 0x10
	codeNoSubscriptionExisted byte = 0x11
	codeUnspecified           byte = 0x80
	codeMalformed             byte = 0x81
	codeProtocolError         byte = 0x82
	codeUnsupportedVersion    byte = 0x84
	codeClientIDNotValid      byte = 0x85
	codeBadUserOrPassword     byte = 0x86
	codeNotAuthorized         byte = 0x87
	codeMaximumConnectTime    byte = 0xA0
	codeServerUnavailable     byte = 0x88
	codeServerShuttingDown    byte = 0x8B
	codeKeepAliveTimeout      byte = 0x8D
	codeSessionTakenOver      byte = 0x8E
	codeTopicFilterInvalid    byte = 0x8F
	codeTopicNameInvalid      byte = 0x90
	codeReceiveMaxExceeded    byte = 0x93
	codeTopicAliasInvalid     byte = 0x94
	codePacketTooLarge        byte = 0x95
	codeQuotaExceeded         byte = 0x97
	codeAdministrativeAction  byte = 0x98
)

// errKeepAliveTooShort refuses an MQTT 3.1.1 CONNECT whose keep-alive is
// below Config.MinKeepAlive.
var errKeepAliveTooShort = errors.New("mqtt: keep-alive shorter than the server's minimum")

// v3 CONNACK return codes.
const (
	v3Accepted           byte = 0
	v3BadProtocolVersion byte = 1
	v3IDRejected         byte = 2
	v3ServerUnavailable  byte = 3
	v3BadUserOrPassword  byte = 4
	v3NotAuthorized      byte = 5
)

// connackV3 maps an MQTT 5 CONNACK reason code onto the 3.1.1 return code.
func connackV3(code byte) byte {
	switch code {
	case codeSuccess:
		return v3Accepted
	case codeUnsupportedVersion:
		return v3BadProtocolVersion
	case codeClientIDNotValid:
		return v3IDRejected
	case codeBadUserOrPassword:
		return v3BadUserOrPassword
	case codeNotAuthorized:
		return v3NotAuthorized
	}
	return v3ServerUnavailable
}

// protoError is a protocol error that ends the connection; MQTT 5 clients
// are told the reason code in a DISCONNECT.
type protoError struct {
	code byte
	text string
}

func (e *protoError) Error() string { return "mqtt: " + e.text }

func errProto(code byte, text string) error { return &protoError{code: code, text: text} }

// reasonOf returns the MQTT 5 reason code for an error from the codec or
// the session.
func reasonOf(err error) byte {
	var pe *protoError
	if errors.As(err, &pe) {
		return pe.code
	}
	var c packets.Code
	if errors.As(err, &c) {
		return c.Code
	}
	return codeMalformed
}
