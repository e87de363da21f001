package amqp

import (
	"sync"

	"github.com/trident-broker/trident/exchange"
)

type txPublish struct {
	msg       *exchange.Message
	mandatory bool
}

type txAck struct {
	tag               uint64
	multiple, requeue bool
	ack               bool
}

func (ch *channel) commit() error {
	pubs, acks := ch.txPubs, ch.txAcks
	ch.txPubs, ch.txAcks = nil, nil
	var wg sync.WaitGroup
	tc := &txConfirm{wg: &wg}
	for _, p := range pubs {
		wg.Add(1)
		res, err := ch.vh().Publish(p.msg, exchange.PublishOpts{Confirmer: tc, Mandatory: p.mandatory})
		if err != nil {
			wg.Done()
			return err
		}
		ch.stats.published.Add(1) // at the commit, as RabbitMQ counts them
		if !res.Pending {
			wg.Done()
		}
		if res.Routed == 0 && p.mandatory {
			ch.sendReturn(p.msg)
		}
	}
	for _, a := range acks {
		refs, err := ch.take(nil, a.tag, a.multiple, a.ack)
		if err != nil {
			return err
		}
		ch.apply(refs, a.ack, a.requeue)
	}
	wg.Wait()
	return nil
}

type txConfirm struct{ wg *sync.WaitGroup }

func (t *txConfirm) Confirm(uint64, bool) { t.wg.Done() }
