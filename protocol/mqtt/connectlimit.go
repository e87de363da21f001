package mqtt

import (
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// readConnectPacket reads the first packet, which must be a CONNECT of at
// most Config.MaxConnectSize bytes: it is read before the client is
// authenticated, so its fixed header is judged before its body is read or
// any buffer is made for it. A larger one is refused (MQTT 5 CONNACK 0x95
// Packet too large when the bytes already buffered show an MQTT 5
// CONNECT, else the connection is just closed), and so is a first packet
// of another type. The same reader serves TCP, TLS and WebSocket.
func (c *conn) readConnectPacket() (wire.Packet, error) {
	h, err := wire.ReadHeader(c.br, c.s.cfg.MaxConnectSize)
	if err != nil {
		if err == wire.ErrTooLarge {
			c.s.log.Warn("MQTT CONNECT too large: connection refused before authentication",
				"conn", c.connName(), "max", c.s.cfg.MaxConnectSize)
			if wire.ConnectVersion(c.br.Peek()) == 5 {
				c.version = 5
				c.refuse(codePacketTooLarge)
			}
		}
		return wire.Packet{}, err
	}
	if h.First>>4 != packets.Connect {
		return wire.Packet{}, errProto(codeProtocolError, "first packet is not CONNECT")
	}
	pk, _, err := wire.ReadBody(c.br, h, 0, nil)
	return pk, err
}
