package stomp

import (
	"crypto/md5"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stomp/frame"
)

// maxSubscriptions bounds a connection's subscriptions.
const maxSubscriptions = 10_000

type ackMode uint8

const (
	ackAuto             ackMode = iota // no acknowledgement (AMQP no-ack)
	ackClient                          // cumulative ACK per subscription
	ackClientIndividual                // one ACK per message
)

// queueParams are a declaration's flags, from defaults and SUBSCRIBE headers.
type queueParams struct {
	durable, autoDelete, exclusive bool
}

// boolHeader reads a "true"/"false" header (RabbitMQ also takes "True"/"False").
func boolHeader(f *frame.Frame, key string) (val, ok bool) {
	switch f.Value(key) {
	case "true", "True":
		return true, true
	case "false", "False":
		return false, true
	}
	return false, false
}

// durableHeader reports durable:true or persistent:true (RabbitMQ takes both).
func durableHeader(f *frame.Frame) bool {
	d, _ := boolHeader(f, "durable")
	p, _ := boolHeader(f, "persistent")
	return d || p
}

// applyHeaders overrides p with the durable, persistent, auto-delete and
// exclusive headers.
func (p queueParams) applyHeaders(f *frame.Frame) queueParams {
	if v, ok := boolHeader(f, "persistent"); ok {
		p.durable = v
	}
	if v, ok := boolHeader(f, "durable"); ok {
		p.durable = v
	}
	if v, ok := boolHeader(f, "auto-delete"); ok {
		p.autoDelete = v
	}
	if v, ok := boolHeader(f, "exclusive"); ok {
		p.exclusive = v
	}
	return p
}

// queueArgHeaders are the x- queue arguments RabbitMQ reads from SUBSCRIBE
// (and SEND to /queue) headers, with their types.
var queueArgHeaders = map[string]byte{
	"x-dead-letter-exchange":          's',
	"x-dead-letter-routing-key":       's',
	"x-expires":                       'i',
	"x-max-length":                    'i',
	"x-max-length-bytes":              'i',
	"x-max-priority":                  'i',
	"x-message-ttl":                   'i',
	"x-max-age":                       's',
	"x-stream-max-segment-size-bytes": 'i',
	"x-queue-type":                    's',
	"x-overflow":                      's',
	"x-single-active-consumer":        'b',
}

func queueArgs(f *frame.Frame) (exchange.Table, error) {
	var args exchange.Table
	for i := range f.Headers {
		h := &f.Headers[i]
		typ, ok := queueArgHeaders[h.Key]
		if !ok || seenBefore(f.Headers, i) {
			continue
		}
		if args == nil {
			args = exchange.Table{}
		}
		v := strings.TrimSpace(h.Value)
		switch typ {
		case 's':
			args[h.Key] = v
		case 'i':
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, errorf("Invalid header", "header '%s' must be an integer, got '%s'\n", h.Key, h.Value)
			}
			args[h.Key] = n
		case 'b':
			args[h.Key] = v == "true"
		}
	}
	return args, nil
}

// declareQueue declares name with p (overridden by f's headers) and f's
// x-arguments.
func (c *conn) declareQueue(name string, f *frame.Frame, p queueParams) (queueParams, error) {
	p = p.applyHeaders(f)
	args, err := queueArgs(f)
	if err != nil {
		return p, err
	}
	r, err := c.vh.Do(c.actor(), exchange.QueueDeclare{Name: name, Opts: exchange.QueueOpts{Durable: p.durable, AutoDelete: p.autoDelete,
		Exclusive: p.exclusive, Args: args, Owner: c}})
	if info := r.Queue; err == nil && info.Created {
		c.audit(auth.AuditObjectCreated, "queue", info.Name)
	}
	return p, err
}

// subscriptionQueueName names the queue of a topic or exchange
// subscription: x-queue-name if given, else derived from the destination
// and id (durable, so that it is found again) or random.
func subscriptionQueueName(f *frame.Frame, dest, id string, durable bool) string {
	if n, ok := f.Get("x-queue-name"); ok && n != "" {
		return n
	}
	if durable {
		sum := md5.Sum([]byte(dest + "\x00" + id))
		return "stomp-subscription-" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return randomID("stomp-subscription-")
}

// ensureSource declares and binds what a SUBSCRIBE to d needs and returns
// the queue to consume and, for a durable subscription, its name again.
func (c *conn) ensureSource(d destination, id string, hasID bool, f *frame.Frame) (queue, durableQ string, err error) {
	switch d.kind {
	case destQueue:
		_, err = c.declareQueue(d.name, f, queueParams{durable: true})
		return d.name, "", err
	case destAMQQueue, destReplyQueue:
		return d.name, "", nil
	case destTopic, destExchange:
		durable := durableHeader(f)
		if durable && !hasID {
			return "", "", errorf("Missing Header", "Durable subscriptions must specify an 'id' header\n")
		}
		p := queueParams{autoDelete: true, exclusive: d.kind == destExchange}
		if durable {
			// A durable subscription outlives its connection and the
			// node: durable, not auto-delete, not exclusive unless the
			// headers say otherwise.
			p = queueParams{durable: true}
		}
		if d.kind == destExchange {
			err = c.checkTopic(auth.Read, d.name, d.pattern)
		} else {
			err = c.checkTopic(auth.Read, topicExchange, d.name)
		}
		if err != nil {
			return "", "", err
		}
		name := subscriptionQueueName(f, d.name, id, durable)
		if p, err = c.declareQueue(name, f, p); err != nil {
			return "", "", err
		}
		xname, key := topicExchange, d.name
		if d.kind == destExchange {
			xname, key = d.name, d.pattern
		}
		if _, err := c.vh.Do(c.actor(), exchange.QueueBind{Queue: name, Exchange: xname, Key: key, Owner: c}); err != nil {
			return "", "", err
		}
		if p.durable {
			durableQ = name
		}
		return name, durableQ, nil
	}
	return "", "", errorf("Invalid destination", "'%s' is not a valid destination for SUBSCRIBE\n", f.Value("destination"))
}

func (c *conn) subscribe(f *frame.Frame) error {
	dh, ok := f.Get("destination")
	if !ok {
		return errorf("Missing destination", "SUBSCRIBE must include a 'destination' header\n")
	}
	d, perr := parseDestination(dh)
	if perr != nil {
		return perr
	}
	id, hasID := f.Get("id")
	if !hasID {
		id = dh // as RabbitMQ: the destination names the subscription
	} else if strings.HasPrefix(id, prefixTempQueue+"/") {
		return errorf("Invalid id", "SUBSCRIBE 'id' must not start with %s/\n", prefixTempQueue)
	}
	if len(c.subs) >= maxSubscriptions {
		return errorf("Too many subscriptions", "at most %d subscriptions per connection\n", maxSubscriptions)
	}
	if _, dup := c.subs[id]; dup {
		return errorf("Duplicated subscription identifier", "A subscription identified by '%s' already exists.\n", id)
	}
	mode := ackAuto
	switch a := f.Value("ack"); a {
	case "", "auto":
	case "client":
		mode = ackClient
	case "client-individual":
		mode = ackClientIndividual
	default:
		return errorf("Invalid ack header", "'%s' is not a valid ack mode (auto, client, client-individual)\n", a)
	}
	prefetch := 0
	if v, ok := f.Get("prefetch-count"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return errorf("Invalid header", "prefetch-count '%s' is not a non-negative integer\n", v)
		}
		prefetch = n
	}
	priority := 0
	if v, ok := f.Get("x-priority"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return errorf("Invalid header", "x-priority '%s' is not an integer\n", v)
		}
		priority = n
	}
	queue, durableQ, err := c.ensureSource(d, id, hasID, f)
	if err != nil {
		return err
	}
	if err := c.check(auth.Read, "queue", queue); err != nil {
		return err
	}
	s := c.newSubscription(id, queue, mode)
	s.durableQ = durableQ
	c.subs[id] = s
	excl, _ := boolHeader(f, "exclusive-consumer")
	cons, err := c.vh.Consume(queue, exchange.ConsumeOpts{Tag: s.tag, NoAck: mode == ackAuto, Prefetch: prefetch,
		Priority: priority, Exclusive: excl, Sink: s, Owner: c, Args: consumeArgs(f), Protocol: exchange.ProtoSTOMP})
	if err != nil {
		delete(c.subs, id)
		return err
	}
	s.cons = cons
	return nil
}

// consumeArgs are the consumer arguments a SUBSCRIBE's headers carry, as
// RabbitMQ's STOMP plugin reads them: x-stream-offset is first, last,
// next, offset=<n> or timestamp=<unix seconds>, anything else next;
// x-stream-consumer-name (our extension: a named consumer's offset) and
// x-single-active-consumer.
func consumeArgs(f *frame.Frame) exchange.Table {
	var args exchange.Table
	if v, ok := f.Get("x-stream-offset"); ok {
		off := any("next")
		switch v = strings.TrimSpace(v); {
		case v == "first" || v == "last" || v == "next":
			off = v
		case strings.HasPrefix(v, "offset="):
			if n, err := strconv.ParseInt(v[len("offset="):], 10, 64); err == nil {
				off = n
			}
		case strings.HasPrefix(v, "timestamp="):
			if n, err := strconv.ParseInt(v[len("timestamp="):], 10, 64); err == nil {
				off = time.Unix(n, 0)
			}
		}
		args = exchange.Table{"x-stream-offset": off}
	}
	if v, ok := f.Get("x-stream-consumer-name"); ok {
		if args == nil {
			args = exchange.Table{}
		}
		args["x-stream-consumer-name"] = v
	}
	// x-single-active-consumer: true with x-stream-consumer-name makes a
	// stream subscription a member of that name's single-active group
	// (our extension, as on AMQP; on a queue it is only a declare header).
	if v, ok := f.Get("x-single-active-consumer"); ok && strings.TrimSpace(v) == "true" {
		if args == nil {
			args = exchange.Table{}
		}
		args["x-single-active-consumer"] = true
	}
	return args
}

func (c *conn) unsubscribe(f *frame.Frame) error {
	id, ok := f.Get("id")
	if !ok {
		if id, ok = f.Get("destination"); !ok {
			return errorf("Missing header", "UNSUBSCRIBE must include an 'id' or 'destination' header\n")
		}
	}
	s := c.subs[id]
	if s == nil {
		return errorf("No subscription found", "UNSUBSCRIBE must refer to an existing subscription.\nSubscription to \"id='%s'\" not found.\n", id)
	}
	delete(c.subs, id)
	s.cancel()
	// UNSUBSCRIBE with durable:true (or persistent:true) ends a durable
	// subscription for good.
	if s.durableQ != "" && durableHeader(f) {
		if _, err := c.vh.Do(c.actor(), exchange.QueueDelete{Name: s.durableQ, Owner: c}); err != nil {
			return err
		}
		c.audit(auth.AuditObjectDeleted, "queue", s.durableQ)
	}
	return nil
}

// --- acknowledgements ---

func (c *conn) ack(f *frame.Frame, isAck bool) error {
	if buffered, err := c.inTransaction(f); buffered || err != nil {
		return err
	}
	return c.doAck(f, isAck)
}

// doAck settles the message an ACK or NACK names: 1.2 by its id header
// (the MESSAGE's ack header), 1.0 and 1.1 by message-id.
func (c *conn) doAck(f *frame.Frame, isAck bool) error {
	key := "message-id"
	if c.version == frame.V12 {
		key = "id"
	}
	mid, ok := f.Get(key)
	if !ok {
		return errorf("Missing header", "%s must include a '%s' header\n", f.Command, key)
	}
	subID, tag, ok := c.parseMessageID(mid)
	s := c.subs[subID]
	if !ok || s == nil {
		return errorf("Subscription not found", "Message with id \"%s\" has no subscription", mid)
	}
	refs, ok := s.take(tag)
	if !ok {
		return errorf("precondition_failed", "PRECONDITION_FAILED - unknown delivery tag %d", tag)
	}
	if !isAck {
		if v, ok := boolHeader(f, "requeue"); ok {
			settle(refs, false, v)
		} else {
			// A plain NACK requeues, as RabbitMQ's, or retries after a
			// delay on a queue with x-retry-delays.
			abandon(refs)
		}
		return nil
	}
	settle(refs, true, false)
	return nil
}

// parseMessageID splits "T_<subscription>@@<session>@@<tag>".
func (c *conn) parseMessageID(mid string) (sub string, tag uint64, ok bool) {
	i := strings.LastIndex(mid, "@@")
	if i < 0 {
		return "", 0, false
	}
	tag, err := strconv.ParseUint(mid[i+2:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	rest, found := strings.CutSuffix(mid[:i], "@@"+c.session)
	if !found || !strings.HasPrefix(rest, "T_") {
		return "", 0, false
	}
	return rest[2:], tag, true
}

// abandon hands deliveries back to their queues (Queue.Abandon): requeued,
// or retried after a delay on a queue with x-retry-delays.
func abandon(refs []unackedRef) {
	byQueue := map[*exchange.Queue][]uint64{}
	var order []*exchange.Queue
	for _, r := range refs {
		if _, ok := byQueue[r.q]; !ok {
			order = append(order, r.q)
		}
		byQueue[r.q] = append(byQueue[r.q], r.seq)
	}
	for _, q := range order {
		q.Abandon(byQueue[q])
	}
}

// settle acks or rejects deliveries, grouped by queue.
func settle(refs []unackedRef, ack, requeue bool) {
	for len(refs) > 0 {
		q := refs[0].q
		var seqs []uint64
		rest := refs[:0]
		for _, r := range refs {
			if r.q == q {
				seqs = append(seqs, r.seq)
			} else {
				rest = append(rest, r)
			}
		}
		switch {
		case !ack:
			q.Reject(seqs, requeue)
		case len(seqs) == 1:
			q.Ack(seqs[0])
		default:
			q.AckMany(seqs)
		}
		refs = rest
	}
}
