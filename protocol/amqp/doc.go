// Package amqp is Trident's AMQP 0-9-1 front end: one session state machine
// per connection that turns frames into calls on the exchange core and core
// errors into AMQP reply codes, as RabbitMQ does.
//
// Each connection has one reader goroutine (decoding from a bufio.Reader and
// running the channel state machines) and one writer goroutine that writes
// whatever has been queued in one system call when there is nothing more to
// add. Deliveries are encoded by whichever goroutine dispatches them (the
// publisher's, usually) straight into the connection's output buffer.
//
// Lock order: exchange Queue.mu → channel.dmu → conn.w.Mu.
package amqp
