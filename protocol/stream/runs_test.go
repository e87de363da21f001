package stream

import (
	"bytes"
	"io"
	"log/slog"
	"testing"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/streamlog"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// TestRunChunksSkipUnreadable: the core hands a subscription its records
// unchecked, so the writer is what reads them: a corrupt record is skipped
// (logged, counted as unreadable) and ends the chunk, the next chunk
// starting after it; a record with a header key twice is sent as the core
// decodes it; every record of the run, skipped or written, is settled; a
// run shared with other readers but holding a corrupt record is sent
// record by record, not as one encoded chunk.
func TestRunChunksSkipUnreadable(t *testing.T) {
	s := newTestServer(t)
	vh, _ := s.b.VHost("/")
	if _, err := vh.DeclareQueue("s", exchange.QueueOpts{Durable: true, Args: exchange.Table{"x-queue-type": "stream"}}); err != nil {
		t.Fatal(err)
	}
	m := &exchange.Message{RoutingKey: "s", Props: exchange.Properties{Headers: exchange.Table{"a": "1", "b": "2"}}, Body: []byte("m")}
	if _, err := vh.Publish(m, exchange.PublishOpts{}); err != nil {
		t.Fatal(err)
	}
	sink, cons := consumeAll(t, vh, exchange.ConsumeOpts{Prefetch: 1, StoredRuns: true}, 1)
	sink.mu.Lock()
	run := sink.runs[0]
	sink.mu.Unlock()
	good := run.Recs[0].Data
	twice := bytes.Replace(good, []byte("\x01bS\x012"), []byte("\x01aS\x012"), 1)
	if bytes.Equal(twice, good) {
		t.Fatal("the record's header b not found")
	}
	decoded, err := exchange.DecodeStoredMessage(twice)
	if err != nil {
		t.Fatal(err)
	}
	wantGood, wantTwice := appendFromCore(nil, m), appendFromCore(nil, decoded)

	q := cons.Queue()
	for _, shared := range []bool{false, true} {
		before := s.b.UnreadableMessages()["//s"]
		cn := &conn{frameMax: 1 << 20, s: &Server{}}
		cn.log = slog.New(slog.NewTextHandler(io.Discard, nil))
		cn.w.Init()
		sub := &subscription{c: cn, q: q, stream: "s", credit: 100}
		r := exchange.RecordRun{Queue: q, Recs: []streamlog.Rec{{Off: 0, Data: good}, {Off: 1, Data: []byte{9, 9}},
			{Off: 2, Data: twice}, {Off: 3, Data: good}}, Seq: run.Seq | 3} // run.Seq is offset 0's
		if shared {
			r.Shared = &exchange.SharedRun{}
		}
		sub.runs, sub.pendingBytes = []exchange.RecordRun{r}, runBytes(r.Recs)
		for sub.hasPending() {
			cn.chunkLocked(sub)
		}
		var chunks []wire.ParsedChunk
		for rd := bytes.NewReader(cn.w.Buf); rd.Len() > 0; {
			p, err := wire.ReadFrame(rd, 1<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			ch, err := wire.ParseDeliver(p)
			if err != nil {
				t.Fatal(err)
			}
			chunks = append(chunks, ch)
		}
		if len(chunks) != 2 || chunks[0].First != 0 || len(chunks[0].Messages) != 1 || chunks[1].First != 2 || len(chunks[1].Messages) != 2 {
			t.Fatalf("shared %v: chunks %+v, want offset 0 alone, then 2 and 3", shared, chunks)
		}
		if !bytes.Equal(chunks[0].Messages[0], wantGood) || !bytes.Equal(chunks[1].Messages[0], wantTwice) || !bytes.Equal(chunks[1].Messages[1], wantGood) {
			t.Fatalf("shared %v: messages %x / %x %x", shared, chunks[0].Messages[0], chunks[1].Messages[0], chunks[1].Messages[1])
		}
		if got := s.b.UnreadableMessages()["//s"] - before; got != 1 {
			t.Fatalf("shared %v: %d unreadable counted, want 1", shared, got)
		}
		settled := 0
		for _, a := range cn.toAck {
			settled += a.n
		}
		if settled != 4 || sub.credit != 98 || sub.pendingBytes != 0 {
			t.Fatalf("shared %v: %d settled, credit %d, %d bytes pending; want 4 settled, 2 chunks' credit spent, 0", shared, settled, sub.credit, sub.pendingBytes)
		}
	}
	cons.Cancel()
}
