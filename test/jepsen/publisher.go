package jepsen

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// publisher publishes until ctx is done, moving to the next node after
// each failed session. Message ids are "p<i>-<n>", unique per publisher.
func (w *workload) publisher(ctx context.Context, i int) {
	p := &pubState{w: w, name: fmt.Sprintf("publisher-%d", i), idPrefix: fmt.Sprintf("p%d-", i)}
	node := i % len(w.cfg.Addrs)
	for ctx.Err() == nil {
		err := p.session(ctx, node)
		if ctx.Err() != nil {
			return
		}
		w.rec.Record(Op{Kind: Info, Process: p.name, Node: node, Detail: "session ended", Err: errString(err)})
		w.log.Debug("jepsen: publisher session ended", "publisher", p.name, "node", node, "err", err)
		node = (node + 1) % len(w.cfg.Addrs)
		sleep(ctx, w.cfg.Backoff)
	}
}

type pubState struct {
	w        *workload
	name     string
	idPrefix string
	next     int
}

// errString is err's text, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// errClosed ends a session whose connection or channel went away.
var errClosed = errors.New("jepsen: connection closed")

// session publishes on one connection until it fails or ctx is done. Every
// invoked publish gets an outcome before session returns: publish-ok,
// publish-fail (nack), or publish-fail indeterminate.
func (p *pubState) session(ctx context.Context, node int) error {
	w := p.w
	conn, err := w.dial(node, p.name)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, w.cfg.InFlight+1))

	var mu sync.Mutex
	inflight := map[uint64]string{} // delivery tag -> id
	window := make(chan struct{}, w.cfg.InFlight)
	listenerDone := make(chan struct{})
	go func() {
		defer close(listenerDone)
		for c := range confirms {
			mu.Lock()
			id, ok := inflight[c.DeliveryTag]
			delete(inflight, c.DeliveryTag)
			mu.Unlock()
			if !ok {
				w.rec.Record(Op{Kind: Info, Process: p.name, Node: node,
					Detail: fmt.Sprintf("confirm for unknown delivery tag %d", c.DeliveryTag)})
				continue
			}
			kind := PublishOK
			if !c.Ack {
				kind = PublishFail
			}
			w.rec.Record(Op{Kind: kind, Process: p.name, Node: node, ID: id})
			<-window
		}
	}()
	// On the way out, whatever has no confirm is indeterminate.
	defer func() {
		conn.Close()
		<-listenerDone
		mu.Lock()
		tags := make([]uint64, 0, len(inflight))
		for tag := range inflight {
			tags = append(tags, tag)
		}
		sort.Slice(tags, func(i, j int) bool { return tags[i] < tags[j] })
		for _, tag := range tags {
			w.rec.Record(Op{Kind: PublishFail, Process: p.name, Node: node, ID: inflight[tag],
				Indeterminate: true, Detail: "no confirm before the session ended"})
		}
		mu.Unlock()
	}()

	var tick <-chan time.Time
	if w.cfg.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / w.cfg.Rate))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return p.awaitConfirms(&mu, inflight, listenerDone)
		case e := <-closed:
			return closeErr(e)
		case window <- struct{}{}:
		}
		if tick != nil {
			select {
			case <-ctx.Done():
				<-window
				return p.awaitConfirms(&mu, inflight, listenerDone)
			case e := <-closed:
				return closeErr(e)
			case <-tick:
			}
		}
		id := fmt.Sprintf("%s%d", p.idPrefix, p.next)
		p.next++
		tag := ch.GetNextPublishSeqNo()
		mu.Lock()
		inflight[tag] = id
		mu.Unlock()
		w.rec.Record(Op{Kind: PublishInvoke, Process: p.name, Node: node, ID: id})
		err := ch.PublishWithContext(context.Background(), "", w.cfg.Queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			MessageId:    id,
			ContentType:  "text/plain",
			Body:         []byte(id),
		})
		if err != nil {
			return err
		}
	}
}

// awaitConfirms waits up to ConfirmTimeout for the outstanding confirms of a
// stopping publisher.
func (p *pubState) awaitConfirms(mu *sync.Mutex, inflight map[uint64]string, listenerDone <-chan struct{}) error {
	deadline := time.Now().Add(p.w.cfg.ConfirmTimeout)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(inflight)
		mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-listenerDone:
			return errClosed
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func closeErr(e *amqp.Error) error {
	if e == nil {
		return errClosed
	}
	return e
}
