package test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestSmokePublishConsume(t *testing.T) {
	b := startBroker(t)
	_, ch := channel(t, b.URL)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{Body: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, ds); string(d.Body) != "hello" {
		t.Fatalf("got %q", d.Body)
	}
}
