package test

import (
	"context"
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestHeadersSurviveRestart: a persistent message's headers, of every field
// type an AMQP client sends, come back after a restart (decoded from the
// store) as they were published: the store's table types are ones the AMQP
// front end encodes (a decimal from the store once made the delivery fail
// to encode, and the message was never sent).
func TestHeadersSurviveRestart(t *testing.T) {
	b := startBroker(t)
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("hdrs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	headers := amqp.Table{
		"str": "s", "bool": true, "i8": int8(-8), "i16": int16(-16), "i32": int32(-32), "i64": int64(-64),
		"f32": float32(1.5), "f64": 2.25, "bytes": []byte{0, 1}, "time": ts,
		"dec":    amqp.Decimal{Scale: 2, Value: 12345},
		"nested": amqp.Table{"dec": amqp.Decimal{Scale: 1, Value: -5}, "deeper": amqp.Table{"n": int32(1)}},
		"array":  []any{"x", int32(1), amqp.Decimal{Scale: 3, Value: 7}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ch.PublishWithContext(ctx, "", "hdrs", false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Headers: headers, Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	// Before the restart (from memory), then after it (from the store).
	check := func(when string) {
		t.Helper()
		_, ch := channel(t, b.URL)
		var d amqp.Delivery
		var ok bool
		var err error
		// basic.get in a goroutine: a get-ok the broker cannot encode is
		// never answered.
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if d, ok, err = ch.Get("hdrs", false); err != nil || ok {
					return
				}
			}
		}()
		select {
		case <-answered:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: basic.get not answered", when)
		}
		if err != nil || !ok {
			t.Fatalf("%s: get: ok=%v err=%v", when, ok, err)
		}
		if string(d.Body) != "m" {
			t.Fatalf("%s: body %q", when, d.Body)
		}
		got := d.Headers
		if tm, ok := got["time"].(time.Time); ok {
			got["time"] = tm.Local()
		}
		want := amqp.Table{}
		for k, v := range headers {
			want[k] = v
		}
		want["time"] = ts.Local()
		if !reflect.DeepEqual(got, want) {
			for k := range want {
				if !reflect.DeepEqual(got[k], want[k]) {
					t.Errorf("%s: header %s: got %#v, want %#v", when, k, got[k], want[k])
				}
			}
			t.Fatalf("%s: headers differ", when)
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
		ch.Close()
	}
	check("before restart")
	b.restart()
	check("after restart")
}
