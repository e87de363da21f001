// Package tracing is the broker's OpenTelemetry tracing: it owns the
// tracer provider and its OTLP exporter, and the two hooks the protocol
// front ends call, Publish (a message arrives from a publisher) and
// Deliver (a queue hands a message to a consumer).
//
// It lives beside package frontend because only the front ends call it:
// the core (package exchange) never sees a span, a tracer or a W3C
// header, and carries a message's trace context only where the message
// already carries it, in its headers (an AMQP header, an MQTT 5 user
// property or a STOMP header named traceparent, and tracestate).
//
// Guarantees:
//   - Off is a nil *Tracer. Every method of a nil *Tracer and of a zero
//     Span returns at once: no allocation, no lock, no map lookup.
//   - On, a message pays only if it carries a traceparent, or (with a
//     sample ratio above 0) when it is a sampled root. Sampling is parent
//     based: a traceparent whose sampled flag is clear is passed on
//     unchanged and gets no span.
//   - Publish records a span of kind server, a child of the incoming
//     context, and replaces the message's traceparent (and tracestate) with
//     its own context before the core routes the message, so every
//     consumer, of every protocol, continues the trace from the broker's
//     span. The headers table is copied, never changed in place.
//   - Deliver records one span of kind producer per delivery, a child of
//     the publish span and linked to it. It runs with the queue's lock
//     held: it does not block (spans end into the batch processor's
//     bounded queue, which drops when full; export runs on its own
//     goroutine).
package tracing
