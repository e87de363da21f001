// Package wire is the MQTT front end's codec: it frames MQTT control packets
// out of a byte stream and back, and maps MQTT topic names and filters onto
// AMQP topic-exchange routing keys and binding keys. It opens no socket,
// takes no lock and knows nothing of the core.
//
// The packet bodies themselves are decoded and encoded by the packets
// package of github.com/mochi-mqtt/server/v2 (MQTT 3.1, 3.1.1 and 5); this
// package adds what is ours: the fixed-header framing with a size limit, a
// guard that turns a panic in a body decoder into a malformed-packet error,
// and the topic mapping.
package wire
