package exchange

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func persistent(x, key, body string) *Message {
	m := &Message{Exchange: x, RoutingKey: key, Body: []byte(body)}
	m.Props.DeliveryMode = 2
	return m
}

func TestPersistentStoredAndAcked(t *testing.T) {
	v, st := newTestVHost(t)
	dq := declareQ(t, v, "dq", QueueOpts{Durable: true})
	tq := declareQ(t, v, "tq", QueueOpts{})
	bindQ(t, v, "dq", "amq.fanout", "", nil)
	bindQ(t, v, "tq", "amq.fanout", "", nil)

	publishM(t, v, persistent("amq.fanout", "", "p1"), PublishOpts{})
	publishM(t, v, &Message{Exchange: "amq.fanout", Body: []byte("t1")}, PublishOpts{})
	publishM(t, v, persistent("amq.fanout", "", "p2"), PublishOpts{})
	if got := st.StoredSeqs(dq.id); len(got) != 2 {
		t.Fatalf("durable queue stored %v, want 2 persistent messages", got)
	}
	if got := st.StoredSeqs(tq.id); len(got) != 0 {
		t.Fatalf("transient queue stored %v", got)
	}
	ms, err := st.storedMessages(dq.id)
	if err != nil || string(ms[0].Body) != "p1" || string(ms[1].Body) != "p2" {
		t.Fatalf("stored %v %v", ms, err)
	}
	// ack deletes; the transient message never was stored.
	d1, _ := dq.Get(false)
	dq.Ack(d1.Seq)
	d2, _ := dq.Get(false) // t1
	dq.Ack(d2.Seq)
	if got := st.StoredSeqs(dq.id); len(got) != 1 {
		t.Fatalf("after acks stored %v", got)
	}
	// reject without requeue deletes too; requeue keeps.
	d3, _ := dq.Get(false)
	dq.Reject([]uint64{d3.Seq}, true)
	if len(st.StoredSeqs(dq.id)) != 1 {
		t.Fatal("requeue deleted the stored message")
	}
	d3, _ = dq.Get(false)
	dq.Reject([]uint64{d3.Seq}, false)
	if len(st.StoredSeqs(dq.id)) != 0 {
		t.Fatal("reject did not delete the stored message")
	}
	// no-ack delivery and purge delete.
	publishM(t, v, persistent("", "dq", "p3"), PublishOpts{})
	publishM(t, v, persistent("", "dq", "p4"), PublishOpts{})
	dq.Get(true)
	dq.Purge()
	consume(t, v, "dq", ConsumeOpts{NoAck: true})
	publishM(t, v, persistent("", "dq", "p5"), PublishOpts{})
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := st.TotalMessages(); n != 0 {
		t.Fatalf("%d messages left in the store", n)
	}
}

func TestConfirms(t *testing.T) {
	v, st := newTestVHost(t)
	declareQ(t, v, "d1", QueueOpts{Durable: true})
	declareQ(t, v, "d2", QueueOpts{Durable: true})
	declareQ(t, v, "t", QueueOpts{})
	bindQ(t, v, "d1", "amq.fanout", "", nil)
	bindQ(t, v, "d2", "amq.fanout", "", nil)
	bindQ(t, v, "t", "amq.fanout", "", nil)
	cf := newConfirms()

	st.Mu.Lock()
	st.Hold = true
	st.Mu.Unlock()
	r := publishM(t, v, persistent("amq.fanout", "", "m"), PublishOpts{Confirmer: cf, Tag: 1})
	if !r.Pending || r.Routed != 3 || !r.OK {
		t.Fatalf("persistent to durable queues: %+v, want pending", r)
	}
	if got := cf.get(1); len(got) != 0 {
		t.Fatalf("confirmed before the store was done: %v", got)
	}
	st.Release()
	<-cf.ch
	st.Sync()
	if got := cf.get(1); len(got) != 1 || !got[0] {
		t.Fatalf("confirms %v, want exactly one true", got)
	}

	// Not pending: transient message, or only non-durable queues.
	r = publishM(t, v, &Message{Exchange: "amq.fanout", Body: []byte("x")}, PublishOpts{Confirmer: cf, Tag: 2})
	if r.Pending || !r.OK {
		t.Fatalf("transient: %+v", r)
	}
	r = publishM(t, v, persistent("", "t", "x"), PublishOpts{Confirmer: cf, Tag: 3})
	if r.Pending || !r.OK || r.Routed != 1 {
		t.Fatalf("persistent to transient queue: %+v", r)
	}
	r = publishM(t, v, persistent("", "nowhere", "x"), PublishOpts{Confirmer: cf, Tag: 4})
	if r.Pending || !r.OK || r.Routed != 0 {
		t.Fatalf("unroutable: %+v", r)
	}
	// Without hold: either pending and confirmed once, or final at once.
	for tag := uint64(10); tag < 60; tag++ {
		r := publishM(t, v, persistent("amq.fanout", "", "m"), PublishOpts{Confirmer: cf, Tag: tag})
		if r.Pending {
			<-cf.ch
		}
	}
	st.Sync()
	for tag := uint64(2); tag < 60; tag++ {
		got := cf.get(tag)
		if len(got) > 1 || (len(got) == 1 && !got[0]) {
			t.Fatalf("tag %d confirms %v", tag, got)
		}
		if tag < 10 && len(got) != 0 {
			t.Fatalf("tag %d confirmed although not pending", tag)
		}
	}
}

func TestConfirmStoreFailure(t *testing.T) {
	v, st := newTestVHost(t)
	declareQ(t, v, "d", QueueOpts{Durable: true})
	cf := newConfirms()
	st.Mu.Lock()
	st.Hold, st.FailErr = true, errors.New("disk on fire")
	st.Mu.Unlock()
	r := publishM(t, v, persistent("", "d", "m"), PublishOpts{Confirmer: cf, Tag: 1})
	if !r.Pending {
		t.Fatalf("%+v", r)
	}
	st.Release()
	<-cf.ch
	if got := cf.get(1); len(got) != 1 || got[0] {
		t.Fatalf("confirms %v, want one false", got)
	}
}

func TestConfirmFastStore(t *testing.T) {
	// The store may finish before Publish returns. The outcome must then
	// be final in the result: OK reflects a store failure.
	v, st := newTestVHost(t)
	declareQ(t, v, "d", QueueOpts{Durable: true})
	cf := newConfirms()
	st.Mu.Lock()
	st.SyncDone = true
	st.Mu.Unlock()
	r := publishM(t, v, persistent("", "d", "m"), PublishOpts{Confirmer: cf, Tag: 1})
	if r.Pending || !r.OK || len(cf.get(1)) != 0 {
		t.Fatalf("fast store: %+v confirms %v", r, cf.get(1))
	}
	st.Mu.Lock()
	st.FailErr = errors.New("disk on fire")
	st.Mu.Unlock()
	r = publishM(t, v, persistent("", "d", "m"), PublishOpts{Confirmer: cf, Tag: 2})
	got := cf.get(2)
	okSeen := (r.Pending && len(got) == 1 && got[0]) || (!r.Pending && r.OK)
	if okSeen {
		t.Fatalf("store failure reported as success: %+v confirms %v", r, got)
	}
}

func TestConfirmRejectPublish(t *testing.T) {
	v, st := newTestVHost(t)
	declareQ(t, v, "full", QueueOpts{Durable: true, Args: Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}})
	declareQ(t, v, "d", QueueOpts{Durable: true})
	bindQ(t, v, "full", "amq.fanout", "", nil)
	bindQ(t, v, "d", "amq.fanout", "", nil)
	cf := newConfirms()
	st.Mu.Lock()
	st.Hold = true
	st.Mu.Unlock()
	r := publishM(t, v, persistent("amq.fanout", "", "m"), PublishOpts{Confirmer: cf, Tag: 1})
	if !r.Pending || r.OK || r.Routed != 1 {
		t.Fatalf("%+v, want pending, not OK, routed 1", r)
	}
	st.Release()
	<-cf.ch
	if got := cf.get(1); len(got) != 1 || got[0] {
		t.Fatalf("confirms %v, want one nack", got)
	}
}

func TestDroppedOnEnqueueNotLeftInStore(t *testing.T) {
	// A persistent message that its own publish pushes out again
	// (x-max-length 0 drop-head, or bigger than x-max-length-bytes) must
	// not stay in the store, or it comes back after a restart.
	st := newFakeStore()
	b := newTestBroker(t, st)
	v := mustVHost(t, b, "/")
	dead := dlxSetup(t, v)
	declareQ(t, v, "zero", QueueOpts{Durable: true, Args: Table{"x-max-length": int32(0), "x-dead-letter-exchange": "dlx"}})
	declareQ(t, v, "bytes", QueueOpts{Durable: true, Args: Table{"x-max-length-bytes": int32(3)}})
	declareQ(t, v, "dlxfull", QueueOpts{Durable: true, Args: Table{"x-max-length": int32(0), "x-overflow": "reject-publish-dlx"}})
	cf := newConfirms()
	r := publishM(t, v, persistent("", "zero", "m"), PublishOpts{Confirmer: cf, Tag: 1})
	if r.Pending {
		<-cf.ch
	}
	publishM(t, v, persistent("", "bytes", "toolong"), PublishOpts{})
	publishM(t, v, persistent("", "dlxfull", "m"), PublishOpts{})
	st.Sync()
	if ready(dead) != 1 {
		t.Fatalf("dead-lettered %d", ready(dead))
	}
	if n := st.TotalMessages(); n != 0 {
		t.Fatalf("%d dropped messages left in the store", n)
	}
	b2 := newTestBroker(t, st)
	v2, _ := b2.VHost("/")
	for _, name := range []string{"zero", "bytes", "dlxfull"} {
		q, err := v2.Queue(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ready(q) != 0 {
			t.Fatalf("queue %s has %d messages after recovery", name, ready(q))
		}
	}
}

func TestRecovery(t *testing.T) {
	st := newFakeStore()
	b1 := newTestBroker(t, st)
	v := mustVHost(t, b1, "/")
	mustVHost(t, b1, "other")
	declareX(t, v, "dx", KindTopic, ExchangeOpts{Durable: true, Args: Table{"alternate-exchange": "ae"}})
	declareX(t, v, "ae", KindFanout, ExchangeOpts{Durable: true, Internal: true})
	declareX(t, v, "tx", KindFanout, ExchangeOpts{}) // transient
	declareX(t, v, "dx2", KindDirect, ExchangeOpts{Durable: true, AutoDelete: true})
	dq := declareQ(t, v, "dq", QueueOpts{Durable: true, Args: Table{"x-max-length": int64(100)}})
	declareQ(t, v, "aeq", QueueOpts{Durable: true})
	declareQ(t, v, "pq", QueueOpts{Durable: true, Args: Table{"x-max-priority": int32(3)}})
	declareQ(t, v, "tq", QueueOpts{})
	declareQ(t, v, "eq", QueueOpts{Durable: true, Exclusive: true, Owner: 1})
	bindQ(t, v, "dq", "dx", "a.#", nil)
	bindQ(t, v, "aeq", "ae", "", nil)
	bindQ(t, v, "tq", "dx", "#", nil)
	bindQ(t, v, "dq", "tx", "", nil)
	bindQ(t, v, "dq", "amq.headers", "", Table{"x-match": "any", "k": "v"})
	if err := v.BindExchange("dx2", "dx", "b.#", nil); err != nil {
		t.Fatal(err)
	}
	bindQ(t, v, "dq", "dx2", "b.c", nil)

	for i := 1; i <= 5; i++ {
		publishM(t, v, persistent("dx", "a.x", fmt.Sprint("m", i)), PublishOpts{})
	}
	publishM(t, v, &Message{Exchange: "dx", RoutingKey: "a.x", Body: []byte("transient")}, PublishOpts{})
	for i, p := range []uint8{1, 3, 1} {
		m := persistent("", "pq", fmt.Sprint("p", i))
		m.Props.Priority = p
		publishM(t, v, m, PublishOpts{})
	}
	pm := persistent("", "eq", "exclusive")
	publishM(t, v, pm, PublishOpts{})
	rich := persistent("dx", "a.rich", "rich")
	rich.Props = Properties{ContentType: "text/plain", DeliveryMode: 2, Headers: Table{"h": int32(1)}, MessageID: "id-1",
		Timestamp: time.Unix(1700000000, 0).UTC(), Expiration: "600000", ReplyTo: "rq", CorrelationID: "c", AppID: "app"}
	publishM(t, v, rich, PublishOpts{})
	// m1 acked; m2 delivered but unacked at "crash" time.
	d, _ := dq.Get(false)
	dq.Ack(d.Seq)
	dq.Get(false)
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	b2 := newTestBroker(t, st)
	if got := b2.VHosts(); !equalStrings(got, []string{"/", "other"}) {
		t.Fatalf("vhosts %v", got)
	}
	v2, _ := b2.VHost("/")
	x, ok := v2.Exchange("dx")
	if !ok || x.Kind() != KindTopic || !x.Durable() || x.Args()["alternate-exchange"] != "ae" {
		t.Fatalf("dx not recovered: %v", x)
	}
	if x, ok := v2.Exchange("ae"); !ok || !x.Internal() {
		t.Fatal("ae not recovered as internal")
	}
	if x, ok := v2.Exchange("dx2"); !ok || !x.AutoDelete() {
		t.Fatal("dx2 not recovered as auto-delete")
	}
	if _, ok := v2.Exchange("tx"); ok {
		t.Fatal("transient exchange recovered")
	}
	for _, n := range []string{"tq", "eq"} {
		if _, err := v2.Queue(n, 1); KindOf(err) != KindNotFound {
			t.Fatalf("queue %s recovered: %v", n, err)
		}
	}
	dq2, err := v2.Queue("dq", nil)
	if err != nil || !dq2.Durable() {
		t.Fatalf("dq: %v", err)
	}
	// The recovered queue is equivalent to its declaration.
	if _, err := v2.DeclareQueue("dq", QueueOpts{Durable: true, Args: Table{"x-max-length": int32(100)}}); err != nil {
		t.Fatalf("redeclare after recovery: %v", err)
	}
	// Messages, in order: m2 (was unacked) .. m5, rich; not the transient one.
	var got []string
	var richD *Message
	for {
		d, ok := dq2.Get(false)
		if !ok {
			break
		}
		got = append(got, string(d.Msg.Body))
		if string(d.Msg.Body) == "rich" {
			richD = d.Msg
		}
	}
	if !equalStrings(got, []string{"m2", "m3", "m4", "m5", "rich"}) {
		t.Fatalf("recovered %v", got)
	}
	if richD == nil || richD.Props.ContentType != "text/plain" || richD.Props.MessageID != "id-1" ||
		!richD.Props.Timestamp.Equal(rich.Props.Timestamp) || richD.Exchange != "dx" || richD.RoutingKey != "a.rich" ||
		richD.Props.Expiration != "600000" || richD.Props.ReplyTo != "rq" || richD.Props.AppID != "app" {
		t.Fatalf("properties not recovered: %+v", richD)
	}
	if n, _ := asInt64(richD.Props.Headers["h"]); n != 1 {
		t.Fatalf("headers %v", richD.Props.Headers)
	}
	pq2, _ := v2.Queue("pq", nil)
	if got := getBodies(pq2); !equalStrings(got, []string{"p1", "p0", "p2"}) {
		t.Fatalf("priority queue recovered %v", got)
	}
	// Bindings came back: direct, AE, headers, exchange-to-exchange.
	aeq, _ := v2.Queue("aeq", nil)
	if r := publish(t, v2, "dx", "a.b", "new"); r.Routed != 1 {
		t.Fatalf("dx a.b routed %d", r.Routed)
	}
	if r := publish(t, v2, "dx", "zzz", "toae"); r.Routed != 1 || ready(aeq) != 1 {
		t.Fatalf("AE after recovery: routed %d aeq %d", r.Routed, ready(aeq))
	}
	hm := &Message{Exchange: "amq.headers", Body: []byte("h")}
	hm.Props.Headers = Table{"k": "v"}
	if r := publishM(t, v2, hm, PublishOpts{}); r.Routed != 1 {
		t.Fatalf("headers binding after recovery: routed %d", r.Routed)
	}
	if r := publish(t, v2, "dx", "b.c", "e2e"); r.Routed != 1 {
		t.Fatalf("e2e binding after recovery: routed %d", r.Routed)
	}
	// New messages come after the recovered ones, with fresh seqs.
	publishM(t, v2, persistent("", "dq", "after"), PublishOpts{})
	seqs := st.StoredSeqs(dq2.id)
	if len(seqs) != 6 || seqs[5] <= seqs[4] {
		t.Fatalf("stored seqs %v", seqs)
	}
	// A queue declared after recovery does not reuse a recovered id.
	nq := declareQ(t, v2, "new", QueueOpts{Durable: true})
	for _, q := range v2.Queues() {
		if q != nq && q.id == nq.id {
			t.Fatalf("queue id %d reused", nq.id)
		}
	}
}

func TestRecoveryExpiresAndDeletes(t *testing.T) {
	st := newFakeStore()
	b1 := newTestBroker(t, st)
	v := mustVHost(t, b1, "/")
	declareQ(t, v, "ttl", QueueOpts{Durable: true, Args: Table{"x-message-ttl": int32(10)}})
	gone := declareQ(t, v, "gone", QueueOpts{Durable: true})
	declareX(t, v, "dx", KindDirect, ExchangeOpts{Durable: true})
	bindQ(t, v, "gone", "dx", "k", nil)
	publishM(t, v, persistent("", "ttl", "m"), PublishOpts{})
	publishM(t, v, persistent("", "gone", "m"), PublishOpts{})
	m := persistent("", "gone", "m")
	m.Props.Expiration = "5"
	if _, err := v.DeleteQueue("gone", false, false, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(st.StoredSeqs(gone.id)); n != 0 {
		t.Fatalf("deleted queue's messages kept: %d", n)
	}
	if k := st.MetaKeys("binding/"); len(k) != 0 {
		t.Fatalf("binding of deleted queue kept: %q", k)
	}
	time.Sleep(30 * time.Millisecond)
	b2 := newTestBroker(t, st)
	v2, _ := b2.VHost("/")
	q, err := v2.Queue("ttl", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ready(q) != 0 {
		t.Fatal("message expired during downtime was recovered")
	}
	st.Sync()
	if n := len(st.StoredSeqs(q.id)); n != 0 {
		t.Fatalf("expired message left in the store: %d", n)
	}
	if _, err := v2.Queue("gone", nil); KindOf(err) != KindNotFound {
		t.Fatal("deleted queue recovered")
	}
}

func TestStoredMetadata(t *testing.T) {
	v, st := newTestVHost(t)
	declareX(t, v, "dx", KindDirect, ExchangeOpts{Durable: true})
	declareX(t, v, "tx", KindDirect, ExchangeOpts{})
	declareQ(t, v, "dq", QueueOpts{Durable: true})
	declareQ(t, v, "tq", QueueOpts{})
	bindQ(t, v, "dq", "dx", "k", nil)
	bindQ(t, v, "tq", "dx", "k", nil)
	bindQ(t, v, "dq", "tx", "k", nil)
	if k := st.MetaKeys("exchange/"); len(k) != 1 {
		t.Fatalf("exchange keys %q", k)
	}
	if k := st.MetaKeys("queue/"); len(k) != 1 {
		t.Fatalf("queue keys %q", k)
	}
	keys := st.MetaKeys("binding/")
	if len(keys) != 1 {
		t.Fatalf("binding keys %q, want only durable->durable", keys)
	}
	r, err := st.metaRecord(keys[0])
	if err != nil || r["source"] != "dx" || r["destination"] != "dq" || r["destination_type"] != "queue" || r["routing_key"] != "k" {
		t.Fatalf("binding record %v %v", r, err)
	}
	if err := v.UnbindQueue("dq", "dx", "k", nil, nil); err != nil {
		t.Fatal(err)
	}
	if k := st.MetaKeys("binding/"); len(k) != 0 {
		t.Fatalf("binding kept after unbind: %q", k)
	}
	if err := v.DeleteExchange("dx", false); err != nil {
		t.Fatal(err)
	}
	if k := st.MetaKeys("exchange/"); len(k) != 0 {
		t.Fatalf("exchange kept after delete: %q", k)
	}
}

func TestDeadLetterPersistentMovesInStore(t *testing.T) {
	v, st := newTestVHost(t)
	declareX(t, v, "dlx", KindFanout, ExchangeOpts{Durable: true})
	dead := declareQ(t, v, "dead", QueueOpts{Durable: true})
	bindQ(t, v, "dead", "dlx", "", nil)
	q := declareQ(t, v, "q", QueueOpts{Durable: true, Args: Table{"x-dead-letter-exchange": "dlx"}})
	publishM(t, v, persistent("", "q", "m"), PublishOpts{})
	d, _ := q.Get(false)
	q.Reject([]uint64{d.Seq}, false)
	st.Sync()
	if len(st.StoredSeqs(q.id)) != 0 || len(st.StoredSeqs(dead.id)) != 1 {
		t.Fatalf("stored q %v dead %v", st.StoredSeqs(q.id), st.StoredSeqs(dead.id))
	}
	ms, _ := st.storedMessages(dead.id)
	if _, ok := ms[0].Props.Headers["x-death"]; !ok {
		t.Fatal("stored dead letter has no x-death")
	}
}

// TestRecoveryThroughApply: a restart replays the stored topology through
// the apply path of committed records. A record that does not decode
// stops the start with an error naming it; a queue whose arguments are
// refused and an invalid policy are skipped, the rest recovered; a policy
// stored before the restart applies to the recovered queue's backlog
// (max-length trims it once its messages are loaded).
func TestRecoveryThroughApply(t *testing.T) {
	st := newFakeStore()
	b1 := newTestBroker(t, st)
	v := mustVHost(t, b1, "/")
	declareX(t, v, "x", KindDirect, ExchangeOpts{Durable: true})
	declareQ(t, v, "q", QueueOpts{Durable: true})
	bindQ(t, v, "q", "x", "k", nil)
	for i := range 5 {
		publishM(t, v, persistent("x", "k", fmt.Sprint("m", i)), PublishOpts{})
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	// Between the runs: a policy limiting q to 2 messages, a queue record
	// with arguments this version refuses, a policy it refuses.
	pol := Policy{Pattern: "^q$", ApplyTo: "queues", Definition: Table{"max-length": int64(2)}}
	st.PutMeta("policy//\x00limit", encodeRecord(pol.record()))
	st.PutMeta("queue//\x00bad", encodeRecord(Table{"id": uint64(999), "durable": true, "args": Table{"x-max-length": "many"}}))
	st.PutMeta("policy//\x00broken", encodeRecord(Table{"pattern": "(", "apply-to": "queues"}))
	b2 := newTestBroker(t, st)
	v2 := mustVHost(t, b2, "/")
	q, err := v2.Queue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v2.Queue("bad", nil); err == nil {
		t.Fatal("the queue with refused arguments was recovered")
	}
	if r := ready(q); r != 2 {
		t.Fatalf("q has %d messages after the restart, want 2 (the policy's max-length)", r)
	}
	if res := publish(t, v2, "x", "k", "after"); res.Routed != 1 {
		t.Fatalf("the recovered binding routed to %d queues", res.Routed)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	// A record that does not decode stops the start and is named.
	st.PutMeta("exchange//\x00corrupt", []byte{0xff, 0x01})
	_, err = New(st, nil)
	var re *RecordError
	if !errors.As(err, &re) || !strings.Contains(re.Key, "corrupt") {
		t.Fatalf("New with a corrupt exchange record: %v, want a RecordError naming it", err)
	}
}
