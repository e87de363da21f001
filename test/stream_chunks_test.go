package test

import (
	"context"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

// pipelinePublish publishes bodies to queue with confirms, all before
// waiting for any (so that the broker reads many in one batch: a stream
// stores them as chunk records), then waits for every confirm.
func pipelinePublish(t *testing.T, ch *amqp.Channel, queue string, bodies []string) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var dcs []*amqp.DeferredConfirmation
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, amqp.Publishing{Body: []byte(b)})
		if err != nil {
			t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for i, dc := range dcs {
		if ok, err := dc.WaitContext(ctxTimeout(t, 30*time.Second)); err != nil || !ok {
			t.Fatalf("confirm of %q: %v %v", bodies[i], ok, err)
		}
	}
}

// checkStreamFrom consumes queue from offset from and checks that the
// next n deliveries are u<from>, u<from+1>, ... at their offsets.
func checkStreamFrom(t *testing.T, url, queue string, from, n int) {
	t.Helper()
	ch, ds := consumeStream(t, url, queue, 1000, amqp.Table{"x-stream-offset": int64(from)})
	defer ch.Close()
	bodies, offs := takeStream(t, ds, n)
	for i := range bodies {
		if want := from + i; bodies[i] != "u"+strconv.Itoa(want) || offs[i] != int64(want) {
			t.Fatalf("from %d, delivery %d: %q at offset %d, want u%d", from, i, bodies[i], offs[i], want)
		}
	}
}

// TestStreamChunksUpgrade (issue 41): a stream written by v0.1.0 (one
// store record per message) is read by this build; what this build
// appends (chunk records, many messages to a record) reads back with
// every offset in place, from any offset, after a kill -9 too.
func TestStreamChunksUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds v0.1.0")
	}
	oldBin := buildRelease(t, previousRelease)
	newBin, err := testbin.Binary()
	if err != nil {
		t.Fatal(err)
	}
	p, err := testbin.Launch(context.Background(), testbin.Options{Binary: oldBin, DataDir: t.TempDir() + "/data"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.Running() {
			_ = p.Stop()
		}
		p.Cleanup()
	})
	const old, more = 300, 1500
	declareStream(t, p.AMQPURL, "up", streamArgs("x-stream-max-segment-size-bytes", int64(20_000)))
	_, ch := channel(t, p.AMQPURL)
	pipelinePublish(t, ch, "up", numbered("u", 0, old))
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}

	p.Binary = newBin
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	checkStreamFrom(t, p.AMQPURL, "up", 0, old)
	checkStreamFrom(t, p.AMQPURL, "up", 123, old-123)
	_, ch = channel(t, p.AMQPURL)
	pipelinePublish(t, ch, "up", numbered("u", old, more))
	checkStreamFrom(t, p.AMQPURL, "up", 0, old+more)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, from := range []int{0, old - 1, old + 1, 555, 1000, old + more - 1} {
		checkStreamFrom(t, p.AMQPURL, "up", from, old+more-from)
	}
	// The next append goes on after the last confirmed one.
	_, ch = channel(t, p.AMQPURL)
	pipelinePublish(t, ch, "up", []string{"u" + strconv.Itoa(old+more)})
	checkStreamFrom(t, p.AMQPURL, "up", old+more-5, 6)
}
