package exchange

import (
	"crypto/rand"
	"encoding/base64"

	"github.com/trident-broker/trident/exchange/event"
)

// ReplyToQueue is the pseudo-queue of RabbitMQ's direct reply-to.
const ReplyToQueue = "amq.rabbitmq.reply-to"

// CloseOwner deletes the exclusive queues of a closing connection.
func (v *VHost) CloseOwner(owner any) {
	v.mu.RLock()
	mine := make([]*Queue, 0, len(v.owned[owner]))
	for q := range v.owned[owner] {
		mine = append(mine, q)
	}
	v.mu.RUnlock()
	for _, q := range mine {
		v.deleteQueueBySelf(q)
	}
}

// Consume adds a consumer to a queue.
func (v *VHost) Consume(queue string, o ConsumeOpts) (*Consumer, error) {
	q, err := v.Queue(queue, o.Owner)
	if err != nil {
		return nil, err
	}
	c, err := q.addConsumer(o)
	if err == nil {
		q.reportConsumer(event.ConsumerCreated, c)
	}
	return c, err
}

// ConsumeReplyTo starts a direct reply-to consumer (basic.consume on
// amq.rabbitmq.reply-to). The consumer must be no-ack. The returned name is
// what the front end writes into the reply-to property of messages the
// same channel publishes with reply-to amq.rabbitmq.reply-to.
func (v *VHost) ConsumeReplyTo(o ConsumeOpts) (*Consumer, string, error) {
	if !o.NoAck {
		return nil, "", errorf(KindPreconditionFailed, "reply consumer cannot acknowledge")
	}
	name := ReplyToQueue + "." + randomToken()
	if c := v.b.cluster; c != nil {
		// The node is in the name, so that a reply published on another
		// node finds its way here (as RabbitMQ does).
		name = ReplyToQueue + "." + base64.RawURLEncoding.EncodeToString([]byte(c.NodeName())) + "." + randomToken()
	}
	q := newQueue(v, name, 0, false, true, true, o.Owner, nil, queueArgs{messageTTL: -1, maxLen: -1, maxLenBytes: -1, memLen: -1, memBytes: -1})
	v.mu.Lock()
	v.replyTo[name] = q
	v.mu.Unlock()
	c, err := q.addConsumer(o)
	return c, name, err
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
