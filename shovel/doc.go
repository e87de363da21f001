// Package shovel runs dynamic shovels, as RabbitMQ's rabbitmq_shovel: each
// moves messages from a source queue (or an exchange, through a queue of
// its own) of an AMQP 0-9-1 broker to a destination queue or exchange of
// the same or another broker, with amqp091-go as the client at both ends.
// Definitions have RabbitMQ's keys (Parse) and are kept in the node's store
// ("shovel/<vhost>\x00<name>"), so a shovel runs again after a restart;
// in a cluster they are written through Config.Replicator, or as
// commands once topology commands are on, and every node holds them.
//
// Guarantees:
//   - With ack-mode on-confirm (the default) a message is acknowledged at
//     the source only after the destination confirmed it: a failure of
//     either end, or of this node, loses nothing (a message may arrive
//     twice, as with RabbitMQ's shovel). on-publish acknowledges once it
//     is sent; no-ack consumes without acknowledgements.
//   - An end that fails or cannot be reached stops the shovel with state
//     "terminated" and the reason, and it starts again after
//     reconnect-delay, for as long as it is defined (a reconnect-delay of
//     0 leaves it terminated, as RabbitMQ).
//   - src-delete-after ("queue-length": what the source queue holds when
//     the shovel starts; or a number) ends the shovel once that many
//     messages are settled, and deletes its definition, as RabbitMQ does.
//
// A URI without a host ("amqp://", "amqp:///vhost") is this node, reached
// over an in-process connection as the user who declared the shovel.
//
// MQTT bridges (bridge_*.go) are the manager's second component
// ("mqtt-bridge"): Mosquitto's connection blocks (ParseBridge), a
// connection from this node to a remote MQTT broker (3.1, 3.1.1 or 5,
// with TLS) with topic rules in, out or both, each with a QoS and local
// and remote prefixes. They share the shovels' storage (records
// "mqtt-bridge/<vhost>\x00<name>", cluster-wide), placement, workers,
// restart and state reporting; the configuration file's (DeclareStatic)
// run on their node and are not stored. A bridge's local end is an
// in-process connection as the user who declared it, so every subscribe
// and publish passes the core's permission check for that user.
// Guarantees, for QoS 1 rules:
//   - out: a message waits in the bridge's durable queue
//     ("mqtt-bridge.<name>") until the remote broker acknowledged it
//     (PUBACK); a failure of either side, or of this node, loses nothing.
//   - in: a message is acknowledged to the remote broker only once the
//     local publish is confirmed; with cleansession false (the default)
//     the remote broker keeps what arrives while the bridge is away.
//   - Messages may arrive twice across such a failure (QoS 1).
package shovel
