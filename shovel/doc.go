// Package shovel runs dynamic shovels, as RabbitMQ's rabbitmq_shovel: each
// moves messages from a source queue (or an exchange, through a queue of
// its own) of an AMQP 0-9-1 broker to a destination queue or exchange of
// the same or another broker, with amqp091-go as the client at both ends.
// Definitions have RabbitMQ's keys (Parse) and are kept in the node's store
// ("shovel/<vhost>\x00<name>"), so a shovel runs again after a restart.
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
// Shovels run on the node whose API declared them; in a cluster the
// definitions are not replicated.
package shovel
