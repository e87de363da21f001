package test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The browse endpoint (GET /api/queues/{vhost}/{name}/browse, our
// extension): pages through a stream from an offset or a time, or through
// a queue from its head, and searches a bounded range, without consuming.

type browseAnswer struct {
	Messages []map[string]any `json:"messages"`
	Next     uint64           `json:"next"`
	Scanned  int              `json:"scanned"`
	End      bool             `json:"end"`
}

func browseAPI(t *testing.T, api apiClient, queue string, q url.Values) browseAnswer {
	t.Helper()
	var a browseAnswer
	api.getJSON("/api/queues/%2F/"+queue+"/browse?"+q.Encode(), &a)
	return a
}

func payloads(a browseAnswer) []string {
	var out []string
	for _, m := range a.Messages {
		out = append(out, m["payload"].(string))
	}
	return out
}

func TestStreamBrowseAPI(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	declareStream(t, b.URL, "bs", streamArgs())
	_, pub := channel(t, b.URL)
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		color := []string{"red", "green"}[i%2]
		dc, err := pub.PublishWithDeferredConfirmWithContext(context.Background(), "", "bs", false, false, amqp.Publishing{
			Body: []byte(fmt.Sprintf("order-%d-%s", i, color)), Headers: amqp.Table{"color": color, "n": int32(i)}})
		if err != nil {
			t.Fatal(err)
		}
		dc.Wait()
	}
	mark := time.Now()
	time.Sleep(20 * time.Millisecond)
	streamPublish(t, pub, "", "bs", []string{"late-1", "late-2"}, nil)

	a := browseAPI(t, api, "bs", url.Values{"offset": {"10"}, "count": {"3"}})
	if got := payloads(a); len(got) != 3 || got[0] != "order-10-red" || a.Messages[0]["offset"].(float64) != 10 || a.Next != 13 || a.End {
		t.Fatalf("page from 10: %v next %d end %v", got, a.Next, a.End)
	}
	a = browseAPI(t, api, "bs", url.Values{"offset": {strconv.FormatUint(a.Next, 10)}, "count": {"2"}})
	if got := payloads(a); got[0] != "order-13-green" || got[1] != "order-14-red" {
		t.Fatalf("next page: %v", got)
	}
	// Search: header value, body substring, within a bounded scan.
	a = browseAPI(t, api, "bs", url.Values{"header": {"color"}, "value": {"green"}, "count": {"100"}})
	if len(a.Messages) != 25 || a.Scanned != 52 || !a.End {
		t.Fatalf("header search: %d found in %d scanned, end %v", len(a.Messages), a.Scanned, a.End)
	}
	a = browseAPI(t, api, "bs", url.Values{"body": {"-4"}, "scan": {"30"}, "count": {"100"}})
	if got := payloads(a); len(got) != 1 || got[0] != "order-4-red" || a.Scanned != 30 || a.End || a.Next != 30 {
		t.Fatalf("body search over 30: %v scanned %d next %d", got, a.Scanned, a.Next)
	}
	a = browseAPI(t, api, "bs", url.Values{"header": {"n"}, "value": {"7"}})
	if got := payloads(a); len(got) != 1 || got[0] != "order-7-green" {
		t.Fatalf("numeric header search: %v", got)
	}
	// From a point in time.
	a = browseAPI(t, api, "bs", url.Values{"timestamp": {mark.UTC().Format(time.RFC3339Nano)}})
	if got := payloads(a); len(got) != 2 || got[0] != "late-1" || !a.End {
		t.Fatalf("from time: %v", got)
	}
	a = browseAPI(t, api, "bs", url.Values{"timestamp": {strconv.FormatInt(mark.UnixMilli()+1, 10)}, "count": {"1"}})
	if got := payloads(a); len(got) != 1 || got[0] != "late-1" {
		t.Fatalf("from unix ms: %v", got)
	}
	// Bad input.
	for _, q := range []string{"offset=-1", "count=x", "timestamp=yesterday", "encoding=hex"} {
		if code, body := api.do("GET", "/api/queues/%2F/bs/browse?"+q, nil); code != 400 {
			t.Errorf("browse ?%s: %d %s", q, code, body)
		}
	}
	api.expect(404, "GET", "/api/queues/%2F/nothere/browse", nil)
	// Browsing consumed nothing.
	if s := api.object("/api/queues/%2F/bs"); s["messages"].(float64) != 52 {
		t.Fatalf("messages after browsing: %v", s["messages"])
	}
}

// TestQueueBrowseAPI browses a classic queue whose backlog is partly
// paged out (x-max-in-memory-length), with priorities: in delivery order,
// without taking anything or flagging it redelivered.
func TestQueueBrowseAPI(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("bq", true, false, false, false, amqp.Table{"x-max-in-memory-length": int32(5), "x-max-priority": int32(2)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// More than the window and the tail buffer: most of it is paged out.
	const n = 700
	var want []string
	for i := 0; i < n; i++ {
		mode := amqp.Persistent
		if i%3 == 0 {
			mode = amqp.Transient
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "bq", false, false,
			amqp.Publishing{DeliveryMode: mode, Body: []byte(fmt.Sprintf("q%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		dc.Wait()
		want = append(want, fmt.Sprintf("q%d", i))
	}
	// One high-priority message goes first.
	dc, _ := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "bq", false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Priority: 2, Body: []byte("urgent")})
	dc.Wait()
	want = append([]string{"urgent"}, want...)

	var got []string
	from := "0"
	for page := 0; page < 100; page++ {
		a := browseAPI(t, api, "bq", url.Values{"offset": {from}, "count": {"70"}})
		got = append(got, payloads(a)...)
		if a.End {
			break
		}
		from = strconv.FormatUint(a.Next, 10)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("browsed %v\nwant     %v", got, want)
	}
	a := browseAPI(t, api, "bq", url.Values{"body": {"q3"}, "count": {"10"}})
	if g := payloads(a); fmt.Sprint(g) != "[q3 q30 q31 q32 q33 q34 q35 q36 q37 q38]" {
		t.Fatalf("search: %v", g)
	}
	if st := api.object("/api/queues/%2F/bq"); st["messages_paged_out"].(float64) < 300 {
		t.Fatalf("the backlog is not paged out (%v): the test would not read the store", st["messages_paged_out"])
	}
	a = browseAPI(t, api, "bq", url.Values{"body": {"q69"}, "offset": {"500"}, "count": {"10"}})
	if g := payloads(a); fmt.Sprint(g) != "[q690 q691 q692 q693 q694 q695 q696 q697 q698 q699]" || a.Messages[0]["position"].(float64) != 691 {
		t.Fatalf("search: %v", g)
	}

	// Nothing was taken or marked.
	q, err := ch.QueueDeclarePassive("bq", true, false, false, false, nil)
	if err != nil || q.Messages != n+1 {
		t.Fatalf("after browsing: %+v %v", q, err)
	}
	ds, err := ch.Consume("bq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		d := receive(t, ds)
		if string(d.Body) != w || d.Redelivered {
			t.Fatalf("consume %d after browsing: %q redelivered=%v, want %q", i, d.Body, d.Redelivered, w)
		}
		_ = d.Ack(false)
	}
}
