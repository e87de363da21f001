package shovel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// States of a shovel, as RabbitMQ reports them.
const (
	StateStarting   = "starting"
	StateRunning    = "running"
	StateTerminated = "terminated" // with a reason; retried after reconnect-delay unless completed
)

// worker runs one shovel: connect both ends, move messages until an end
// fails (then wait reconnect-delay and start again) or until
// src-delete-after is reached.
type worker struct {
	m           *Manager
	vhost, name string
	user        string
	def         Definition
	bridge      *BridgeDefinition // an MQTT bridge (bridge_worker.go); nil for a shovel
	unbind      []string          // a bridge's stale binding keys (shovelDef.unbind)
	value       map[string]any

	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	state  string
	reason string
	since  time.Time
	src    string // the URIs in use, passwords hidden
	dst    string

	moved atomic.Int64 // messages settled at the source since the start
	// A bridge's messages forwarded to the remote (out) and from it (in)
	// since the start.
	out, in atomic.Int64
}

// delay is how long a stopped worker waits before it starts again.
func (w *worker) delay() time.Duration {
	if w.bridge != nil {
		return w.bridge.RestartTimeout
	}
	return w.def.ReconnectDelay
}

func (w *worker) set(state, reason string) {
	w.mu.Lock()
	w.state, w.reason, w.since = state, reason, time.Now()
	w.mu.Unlock()
}

func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	for {
		w.set(StateStarting, "")
		var finished bool
		var err error
		if w.bridge != nil {
			err = w.bridgeOnce(ctx)
		} else {
			finished, err = w.once(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		if finished {
			w.set(StateTerminated, "completed")
			w.m.completed(w)
			return
		}
		w.set(StateTerminated, err.Error())
		if w.delay() == 0 {
			// As RabbitMQ: a reconnect-delay of 0 does not reconnect.
			w.m.log.Warn("shovel stopped", "vhost", w.vhost, "shovel", w.name, "err", err)
			return
		}
		w.m.log.Warn("shovel stopped; retrying", "vhost", w.vhost, "shovel", w.name, "err", err, "in", w.delay())
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.delay()):
		}
	}
}

// ErrConnect is why a shovel's end could not be reached: its URIs did
// not dial, did not speak AMQP, refused the TLS or the AMQP handshake or
// the login. The API shows only that (connectError), so that a shovel is
// no port scanner; the server log has the details at debug level.
var ErrConnect = errors.New("shovel: connection failed")

// connectError is ErrConnect at one end ("source", "destination").
type connectError struct{ end string }

func (e connectError) Error() string { return e.end + ": connection failed" }
func (e connectError) Unwrap() error { return ErrConnect }

// handshakeTimeout bounds a TCP connect and the AMQP handshake after it.
const handshakeTimeout = 10 * time.Second

// dial connects to the first of uris that answers, for end.
func (w *worker) dial(end string, uris []string) (*amqp.Connection, string, error) {
	for _, uri := range uris {
		c, err := w.dialOne(uri)
		if err == nil {
			return c, redact(uri), nil
		}
		w.m.log.Debug("shovel connection failed", "vhost", w.vhost, "shovel", w.name, "end", end, "uri", redact(uri), "err", err)
	}
	return nil, "", connectError{end: end}
}

// dialOne connects to uri. A local URI ("amqp://", "amqp:///vhost") is an
// in-process connection: as the user who declared the shovel, or, when the
// URI names a user, as that user authenticated like a remote client. Any
// other URI is a TCP connection recorded in the node's Sockets, so that
// this node never takes it for a loopback one: the URI's user logs in as a
// remote client would.
func (w *worker) dialOne(uri string) (*amqp.Connection, error) {
	props := amqp.Table{"connection_name": "Shovel " + w.name}
	if vh, ok := localVHost(uri); ok {
		user, target := w.user, "amqp://localhost/"
		if u, err := url.Parse(uri); err == nil && u.User != nil {
			pass, _ := u.User.Password()
			user = "" // authenticate the URI's credentials (Config.Local)
			target = (&url.URL{Scheme: "amqp", User: url.UserPassword(u.User.Username(), pass), Host: "localhost", Path: "/"}).String()
		}
		return amqp.DialConfig(target, amqp.Config{Vhost: vh, Properties: props, Heartbeat: 10 * time.Second,
			Dial: func(string, string) (net.Conn, error) { return w.m.local(user) }})
	}
	return amqp.DialConfig(uri, amqp.Config{Properties: props, Heartbeat: 10 * time.Second, Dial: w.m.sockets.dial(handshakeTimeout)})
}

// ensureQueue declares queue name if it does not exist (durable, no
// arguments, as RabbitMQ's shovel) and returns its message count.
func ensureQueue(c *amqp.Connection, name string) (int, error) {
	ch, err := c.Channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err == nil {
		_ = ch.Close()
		return q.Messages, nil
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		return 0, err
	}
	ch, err = c.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err = ch.QueueDeclare(name, true, false, false, false, nil)
	return q.Messages, err
}

// session is one connection of a shovel's two ends, set up by open.
type session struct {
	src, dst *amqp.Connection
	sch, dch *amqp.Channel
	ds       <-chan amqp.Delivery
	confirms chan amqp.Confirmation // on-confirm only
	closed   [4]chan *amqp.Error    // both connections and channels
	limit    int64                  // messages to move before finishing, 0 no limit
	empty    bool                   // nothing to move (queue-length of an empty queue)
}

const consumerTag = "shovel"

// once runs the shovel until an end fails (finished false, err why) or
// its src-delete-after is reached (finished true).
func (w *worker) once(ctx context.Context) (finished bool, err error) {
	d := w.def
	src, srcURI, err := w.dial("source", d.SrcURIs)
	if err != nil {
		return false, err
	}
	defer src.Close()
	dst, dstURI, err := w.dial("destination", d.DestURIs)
	if err != nil {
		return false, err
	}
	defer dst.Close()
	w.mu.Lock()
	w.src, w.dst = srcURI, dstURI
	w.mu.Unlock()
	s := &session{src: src, dst: dst}
	if err := w.open(s); err != nil || s.empty {
		return s.empty, err
	}
	w.set(StateRunning, "")
	return w.move(ctx, s)
}

// open declares what the shovel needs at both ends and starts consuming.
func (w *worker) open(s *session) error {
	d := w.def
	src, dst := s.src, s.dst
	limit := d.DeleteAfter
	queue := d.SrcQueue
	if queue != "" {
		n, err := ensureQueue(src, queue)
		if err != nil {
			return fmt.Errorf("source queue '%s': %w", queue, err)
		}
		if limit < 0 {
			limit = int64(n) // what the queue holds now
			if limit == 0 {
				s.empty = true
				return nil
			}
		}
	}
	s.limit = limit
	if d.DestQueue != "" {
		if _, err := ensureQueue(dst, d.DestQueue); err != nil {
			return fmt.Errorf("destination queue '%s': %w", d.DestQueue, err)
		}
	}
	var err error
	if s.sch, err = src.Channel(); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if queue == "" {
		q, err := s.sch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		if err := s.sch.QueueBind(q.Name, d.SrcExchangeKey, d.SrcExchange, false, nil); err != nil {
			return fmt.Errorf("source exchange '%s': %w", d.SrcExchange, err)
		}
		queue = q.Name
	}
	if s.dch, err = dst.Channel(); err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	if d.AckMode == AckOnConfirm {
		if err := s.dch.Confirm(false); err != nil {
			return fmt.Errorf("destination: %w", err)
		}
		s.confirms = s.dch.NotifyPublish(make(chan amqp.Confirmation, d.Prefetch+16))
	}
	if d.AckMode != AckNoAck {
		if err := s.sch.Qos(d.Prefetch, 0, false); err != nil {
			return fmt.Errorf("source: %w", err)
		}
	}
	if s.ds, err = s.sch.Consume(queue, consumerTag, d.AckMode == AckNoAck, false, false, false, nil); err != nil {
		return fmt.Errorf("source queue '%s': %w", queue, err)
	}
	s.closed = [4]chan *amqp.Error{src.NotifyClose(make(chan *amqp.Error, 1)), dst.NotifyClose(make(chan *amqp.Error, 1)),
		s.sch.NotifyClose(make(chan *amqp.Error, 1)), s.dch.NotifyClose(make(chan *amqp.Error, 1))}
	return nil
}

// move forwards messages until an end fails or the limit is reached: the
// per-message loop, kept in one piece (one select over both ends).
func (w *worker) move(ctx context.Context, s *session) (finished bool, err error) {
	d := w.def
	sch, dch, ds, confirms, limit := s.sch, s.dch, s.ds, s.confirms, s.limit
	var sent, settled int64
	pending := map[uint64]uint64{} // destination publish seq → source delivery tag
	// Confirmed messages are acked at the source in batches (multiple):
	// confirms come in publish order, which is the source's delivery
	// order, and a nack is settled at once after the acks before it.
	var ackUpTo uint64
	var batch int64
	flush := func() error {
		if ackUpTo == 0 {
			return nil
		}
		err := sch.Ack(ackUpTo, true)
		settled += batch
		w.moved.Add(batch)
		ackUpTo, batch = 0, 0
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		return nil
	}
	for limit <= 0 || settled < limit {
		select {
		case <-ctx.Done():
			_ = flush()
			return false, ctx.Err()
		case e := <-s.closed[0]:
			return false, fmt.Errorf("source connection closed: %v", e)
		case e := <-s.closed[1]:
			return false, fmt.Errorf("destination connection closed: %v", e)
		case e := <-s.closed[2]:
			return false, fmt.Errorf("source channel closed: %v", e)
		case e := <-s.closed[3]:
			return false, fmt.Errorf("destination channel closed: %v", e)
		case m, ok := <-ds:
			if !ok {
				return false, errors.New("source consumer cancelled")
			}
			if limit > 0 && sent >= limit {
				continue // prefetched past the limit: requeued when the channel closes
			}
			x, key := d.route(m)
			seq := dch.GetNextPublishSeqNo()
			if err := dch.PublishWithContext(ctx, x, key, false, false, w.publishing(m)); err != nil {
				return false, fmt.Errorf("destination: %w", err)
			}
			sent++
			switch d.AckMode {
			case AckOnConfirm:
				pending[seq] = m.DeliveryTag
			case AckOnPublish:
				if err := m.Ack(false); err != nil {
					return false, fmt.Errorf("source: %w", err)
				}
				settled++
				w.moved.Add(1)
			default:
				settled++
				w.moved.Add(1)
			}
			if limit > 0 && sent == limit {
				// Enough: stop consuming (ds closes) and wait for the
				// last confirms.
				_ = sch.Cancel(consumerTag, false)
				ds = nil
			}
		case c := <-confirms:
			tag, ok := pending[c.DeliveryTag]
			if !ok {
				continue
			}
			delete(pending, c.DeliveryTag)
			if !c.Ack {
				// The destination refused it: back to the source.
				if err := flush(); err != nil {
					return false, err
				}
				if err := sch.Nack(tag, false, true); err != nil {
					return false, fmt.Errorf("source: %w", err)
				}
				sent--
				if ds == nil {
					return false, errors.New("destination refused a message") // resent on the restart
				}
				continue
			}
			ackUpTo = tag
			batch++
			if len(confirms) == 0 || batch >= int64(d.Prefetch/2)+1 || (limit > 0 && settled+batch >= limit) {
				if err := flush(); err != nil {
					return false, err
				}
			}
		}
	}
	return true, nil
}

// route is where a message goes: the destination queue, or exchange with
// its key (the message's own key when none is given); without either, the
// message's own exchange and key.
func (d *Definition) route(m amqp.Delivery) (string, string) {
	switch {
	case d.DestQueue != "":
		return "", d.DestQueue
	case d.DestExchange != "":
		if d.hasDestXKey {
			return d.DestExchange, d.DestExchangeKey
		}
		return d.DestExchange, m.RoutingKey
	}
	return m.Exchange, m.RoutingKey
}

// publishing copies a delivery's message for the destination; user-id is
// left out, since a broker checks it against the publishing connection's
// user, which the shovel's is not.
func (w *worker) publishing(m amqp.Delivery) amqp.Publishing {
	h := m.Headers
	if w.def.AddForwardHeaders {
		h = amqp.Table{}
		for k, v := range m.Headers {
			h[k] = v
		}
		h["x-shovelled"] = []any{amqp.Table{"shovel-name": w.name, "shovel-vhost": w.vhost, "shovel-type": "dynamic",
			"src-queue": w.def.SrcQueue, "src-exchange": w.def.SrcExchange, "dest-queue": w.def.DestQueue, "dest-exchange": w.def.DestExchange}}
	}
	return amqp.Publishing{Headers: h, ContentType: m.ContentType, ContentEncoding: m.ContentEncoding,
		DeliveryMode: m.DeliveryMode, Priority: m.Priority, CorrelationId: m.CorrelationId, ReplyTo: m.ReplyTo,
		Expiration: m.Expiration, MessageId: m.MessageId, Timestamp: m.Timestamp, Type: m.Type,
		AppId: m.AppId, Body: m.Body}
}
