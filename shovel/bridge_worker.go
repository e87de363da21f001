package shovel

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// A bridge's local end is an in-process connection to this node as the
// user who declared the bridge, the same transport as a shovel's
// "amqp://" URI: every declare, bind, consume and publish it does is
// checked by the core's one permission check for that user, as that
// user's own client would be. MQTT topics map onto the MQTT exchange's
// routing keys as the MQTT front end maps them ("/" ↔ ".", "+" ↔ "*").
//
//   - out: a durable queue of its own ("mqtt-bridge.<name>") bound to the
//     MQTT exchange by each out rule's local filter; a message is
//     acknowledged there only once the remote broker acknowledged it
//     (PUBACK, for QoS 1), so a stop of either side loses nothing.
//   - in: subscriptions on the remote broker (a persistent session unless
//     cleansession); a message is published here with a publisher
//     confirm, and acknowledged to the remote only once confirmed (for a
//     persistent message routed to a durable queue: stored).
//
// What the bridge publishes here carries its mark (hdrBridge) and its
// own out queue skips such messages, so a "both" rule does not loop.

// hdrBridge marks a message a bridge published here: "<vhost>/<name>".
// Headers beginning x-mqtt- are not shown to MQTT 5 clients.
const hdrBridge = "x-mqtt-bridge"

// MQTT front end headers the bridge reads and writes.
const (
	hdrMQTTRetain = "x-mqtt-retain"
	hdrMQTTQoS    = "x-mqtt-publish-qos"
)

// BridgeQueue is the name of the durable queue that holds a bridge's
// out-direction messages.
func BridgeQueue(name string) string { return "mqtt-bridge." + name }

func localURI(vhost string) string { return "amqp:///" + url.PathEscape(vhost) }

// bridgeLocal is a bridge's local end, set up by openLocal.
type bridgeLocal struct {
	conn     *amqp.Connection
	cch, pch *amqp.Channel          // consume (out), publish (in)
	ds       <-chan amqp.Delivery   // nil without out rules
	confirms chan amqp.Confirmation // of pch
	closed   [3]chan *amqp.Error
}

// openLocal declares the out queue and its bindings and opens the publish
// channel.
func (w *worker) openLocal(c *amqp.Connection) (*bridgeLocal, error) {
	d := w.bridge
	l := &bridgeLocal{conn: c}
	var err error
	if l.cch, err = c.Channel(); err != nil {
		return nil, err
	}
	if l.pch, err = c.Channel(); err != nil {
		return nil, err
	}
	ex := w.m.mqttExchange
	keys := d.outKeys()
	if len(keys) == 0 && len(w.unbind) > 0 {
		// Its out rules all gone: so is its queue.
		if ch, err := c.Channel(); err == nil {
			_, _ = ch.QueueDelete(BridgeQueue(w.name), false, false, false)
			_ = ch.Close()
		}
	}
	if len(keys) > 0 {
		q := BridgeQueue(w.name)
		var args amqp.Table
		if w.m.clustered() {
			// Any node may run the bridge next: its queue outlives a node.
			args = amqp.Table{"x-queue-type": "quorum"}
		}
		if _, err := l.cch.QueueDeclare(q, true, false, false, false, args); err != nil {
			return nil, fmt.Errorf("queue '%s': %w", q, err)
		}
		for _, k := range keys {
			if err := l.cch.QueueBind(q, k, ex, false, nil); err != nil {
				return nil, fmt.Errorf("subscribing to '%s' (binding key '%s' of exchange '%s'): %w", wire.KeyToTopic(k), k, ex, err)
			}
		}
		for _, k := range w.unbind {
			// A rule of the definition this one replaced (an error closes
			// only this channel).
			if ch, err := c.Channel(); err == nil {
				_ = ch.QueueUnbind(q, k, ex, nil)
				_ = ch.Close()
			}
		}
		if err := l.cch.Qos(d.Prefetch, 0, false); err != nil {
			return nil, err
		}
		if l.ds, err = l.cch.Consume(q, "mqtt-bridge", false, false, false, false, nil); err != nil {
			return nil, fmt.Errorf("queue '%s': %w", q, err)
		}
	}
	if err := l.pch.Confirm(false); err != nil {
		return nil, err
	}
	l.confirms = l.pch.NotifyPublish(make(chan amqp.Confirmation, d.Prefetch+16))
	l.closed = [3]chan *amqp.Error{c.NotifyClose(make(chan *amqp.Error, 1)), l.cch.NotifyClose(make(chan *amqp.Error, 1)),
		l.pch.NotifyClose(make(chan *amqp.Error, 1))}
	return l, nil
}

// bridgeOnce runs a bridge until an end fails.
func (w *worker) bridgeOnce(ctx context.Context) error {
	d := w.bridge
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lc, err := w.dialOne(localURI(w.vhost))
	if err != nil {
		return fmt.Errorf("local: %v", err)
	}
	defer lc.Close()
	l, err := w.openLocal(lc)
	if err != nil {
		return fmt.Errorf("local: %v", err)
	}
	in := make(chan remoteMsg, d.Prefetch)
	stop := make(chan struct{})
	r, addr, err := w.connectRemote(ctx, in, stop)
	if err != nil {
		close(stop)
		return err
	}
	// First the handlers give up (stop), then the client closes: a handler
	// waiting on in would hold up its Disconnect.
	defer r.close()
	defer close(stop)
	w.mu.Lock()
	w.src, w.dst = "local", addr
	w.mu.Unlock()
	var subs []remoteSub
	for _, t := range d.Topics {
		if t.in() {
			subs = append(subs, remoteSub{filter: t.RemoteFilter(), qos: t.QoS})
		}
	}
	// A persistent remote session sends what it queued for the bridge
	// right after CONNACK, before the SUBACK: the loop takes it in while
	// the subscription is on its way (the client's router delivers in
	// order, so waiting for the SUBACK with a full hand-off would never
	// see it). The bridge is running once the remote has answered.
	subscribed := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
		defer cancel()
		subscribed <- r.subscribe(sctx, subs)
	}()
	return w.bridgeLoop(ctx, l, r, in, subscribed)
}

// subscribeTimeout bounds the wait for the remote's SUBACK.
const subscribeTimeout = 30 * time.Second

// outResult is the end of one publish to the remote.
type outResult struct {
	tag uint64
	err error
}

// bridgeLoop forwards messages both ways until an end fails: one select
// over both ends. Publishes to the remote run on goroutines of their own
// (at most Prefetch: the local queue's window), each waiting for its
// PUBACK; local publishes are confirmed in order, and each confirm
// releases the oldest remote acknowledgement.
func (w *worker) bridgeLoop(ctx context.Context, l *bridgeLocal, r remote, in <-chan remoteMsg, subscribed <-chan error) error {
	d := w.bridge
	mark := w.vhost + "/" + w.name
	results := make(chan outResult, d.Prefetch+1)
	var acks []func() // remote acknowledgements waiting for local confirms, in order
	ds := l.ds
	// Over MQTT 3.1.1 a remote broker sends the bridge back what it
	// published on a topic it also subscribes to (a "both" rule; MQTT 5
	// has no-local): each such publish expects its echo, which is dropped.
	echoes := newEchoes(d.ProtocolVersion != BridgeMQTT50)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-l.closed[0]:
			return fmt.Errorf("local connection closed: %v", e)
		case e := <-l.closed[1]:
			return fmt.Errorf("local: %v", e)
		case e := <-l.closed[2]:
			return fmt.Errorf("local: publishing: %v", e)
		case err := <-r.lost():
			return fmt.Errorf("remote connection lost: %v", err)
		case err := <-subscribed:
			if err != nil {
				return fmt.Errorf("remote: %v", err)
			}
			subscribed = nil
			w.set(StateRunning, "")
		case m, ok := <-ds:
			if !ok {
				return errors.New("local: the bridge's queue consumer was cancelled")
			}
			topic := wire.KeyToTopic(m.RoutingKey)
			rt, qos, match := d.toRemote(topic)
			if mk, _ := m.Headers[hdrBridge].(string); mk == mark || !match {
				// Its own (a "both" rule's echo), or a rule removed since.
				if err := m.Ack(false); err != nil {
					return fmt.Errorf("local: %w", err)
				}
				continue
			}
			if m.DeliveryMode != amqp.Persistent {
				qos = 0 // published at QoS 0: forwarded at QoS 0, as Mosquitto
			}
			retain, _ := m.Headers[hdrMQTTRetain].(bool)
			if _, back := d.toLocal(rt); back {
				echoes.expect(rt, m.Body)
			}
			go func(tag uint64, body []byte) {
				results <- outResult{tag: tag, err: r.publish(ctx, rt, qos, retain, body)}
			}(m.DeliveryTag, m.Body)
		case res := <-results:
			if res.err != nil {
				// What is unacknowledged goes back to the queue when the
				// local channel closes, and is sent again.
				return fmt.Errorf("remote: publish: %v", res.err)
			}
			if err := l.cch.Ack(res.tag, false); err != nil {
				return fmt.Errorf("local: %w", err)
			}
			w.out.Add(1)
		case m := <-in:
			lt, ok := d.toLocal(m.topic)
			if !ok || echoes.echo(m.topic, m.payload) {
				m.ack()
				continue
			}
			p := amqp.Publishing{Body: m.payload, DeliveryMode: amqp.Transient, Headers: amqp.Table{hdrBridge: mark}}
			if m.qos > 0 {
				p.DeliveryMode = amqp.Persistent
			}
			if m.qos == 2 {
				p.Headers[hdrMQTTQoS] = uint8(2)
			}
			if m.retain {
				p.Headers[hdrMQTTRetain] = true
			}
			if err := l.pch.PublishWithContext(ctx, w.m.mqttExchange, wire.TopicToKey(lt), false, false, p); err != nil {
				return fmt.Errorf("local: publishing: %v", err)
			}
			acks = append(acks, m.ack)
		case c := <-l.confirms:
			if !c.Ack {
				// Not acknowledged to the remote: it sends it again.
				return errors.New("local: a publish was refused (nack)")
			}
			if len(acks) > 0 {
				acks[0]()
				acks[0] = nil
				acks = acks[1:]
				w.in.Add(1)
			}
		}
	}
}

// echoTTL bounds how long a publish waits for its echo.
const echoTTL = time.Minute

// echoes are the echoes a 3.1.1 bridge expects: by topic and payload.
type echoes struct {
	on bool
	m  map[echoKey]*echoEntry
}

type echoKey struct {
	topic string
	sum   uint64
}

type echoEntry struct {
	n  int
	at time.Time
}

func newEchoes(on bool) *echoes { return &echoes{on: on, m: map[echoKey]*echoEntry{}} }

func payloadSum(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

func (e *echoes) expect(topic string, payload []byte) {
	if !e.on {
		return
	}
	now := time.Now()
	if len(e.m) >= 4096 {
		for k, x := range e.m {
			if now.Sub(x.at) > echoTTL {
				delete(e.m, k)
			}
		}
	}
	k := echoKey{topic, payloadSum(payload)}
	x := e.m[k]
	if x == nil {
		x = &echoEntry{}
		e.m[k] = x
	}
	x.n++
	x.at = now
}

// echo reports whether a message from the remote is an expected echo,
// and counts it.
func (e *echoes) echo(topic string, payload []byte) bool {
	if !e.on || len(e.m) == 0 {
		return false
	}
	k := echoKey{topic, payloadSum(payload)}
	x := e.m[k]
	if x == nil {
		return false
	}
	if time.Since(x.at) > echoTTL {
		delete(e.m, k)
		return false
	}
	if x.n--; x.n <= 0 {
		delete(e.m, k)
	}
	return true
}

// outKeys are the binding keys of d's out rules.
func (d *BridgeDefinition) outKeys() []string {
	var keys []string
	for _, t := range d.Topics {
		if t.out() {
			keys = append(keys, wire.FilterToKey(t.LocalFilter()))
		}
	}
	return keys
}

// staleKeys are the out binding keys of old (and those old had still to
// remove) that d does not have.
func staleKeys(old, d *BridgeDefinition, pending []string) []string {
	keep := map[string]bool{}
	for _, k := range d.outKeys() {
		keep[k] = true
	}
	var out []string
	seen := map[string]bool{}
	for _, k := range append(old.outKeys(), pending...) {
		if !keep[k] && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
