package jepsen

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// consumer consumes with manual acks until ctx is done, moving to the next
// node after each failed session.
func (w *workload) consumer(ctx context.Context, i int) {
	name := fmt.Sprintf("consumer-%d", i)
	node := i % len(w.cfg.Addrs)
	for session := 0; ctx.Err() == nil; session++ {
		err := w.consumeSession(ctx, name, fmt.Sprintf("%s.%d", name, session), node)
		if ctx.Err() != nil {
			return
		}
		w.rec.Record(Op{Kind: Info, Process: name, Node: node, Detail: "session ended", Err: errString(err)})
		w.log.Debug("jepsen: consumer session ended", "consumer", name, "node", node, "err", err)
		node = (node + 1) % len(w.cfg.Addrs)
		sleep(ctx, w.cfg.Backoff)
	}
}

// consumeSession records every delivery, then acks it, until the connection
// fails or ctx is done.
func (w *workload) consumeSession(ctx context.Context, name, tag string, node int) error {
	conn, err := w.dial(node, tag)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(w.cfg.Prefetch, 0, false); err != nil {
		return err
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := ch.Consume(w.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return err
	}
	w.consuming.Add(1)
	defer w.consuming.Add(-1)
	w.touch()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			return closeErr(e)
		case d, ok := <-deliveries:
			if !ok {
				return errClosed
			}
			w.touch()
			id := d.MessageId
			op := Op{Kind: Deliver, Process: name, Node: node, ID: id, Redelivered: d.Redelivered, Consumer: tag}
			if id == "" {
				op.ID = string(d.Body)
			} else if string(d.Body) != id {
				op.Corrupt = true
				op.Detail = fmt.Sprintf("body %q differs from message-id", d.Body)
			}
			w.rec.Record(op)
			if err := d.Ack(false); err != nil {
				return err
			}
			w.rec.Record(Op{Kind: AckSent, Process: name, Node: node, ID: op.ID, Consumer: tag})
		}
	}
}
