package test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/cmd/trident/node"
	"github.com/trident-broker/trident/conf"
)

// broker is an in-process Trident started for one test.
type broker struct {
	t    testing.TB
	n    *node.Node
	cfg  conf.Config
	URL  string
	Addr string
	log  *slog.Logger // the node's logger (nil: TRIDENT_TEST_LOG decides)
}

// startBroker starts a node on 127.0.0.1:0 with a fresh data dir (or dir,
// if given) and stops it when the test ends. mutate may change the config.
func startBroker(t testing.TB, mutate ...func(*conf.Config)) *broker {
	t.Helper()
	return startBrokerLog(t, nil, mutate...)
}

// startBrokerLog is startBroker with the node logging to log.
func startBrokerLog(t testing.TB, log *slog.Logger, mutate ...func(*conf.Config)) *broker {
	t.Helper()
	cfg := conf.Default()
	cfg.DataDir = t.TempDir()
	cfg.AMQP.Listen = "127.0.0.1:0"
	cfg.MQTT.Listen, cfg.MQTT.WSListen = "", ""
	cfg.STOMP.Listen, cfg.STOMP.WSListen = "", ""
	cfg.Stream.Listen, cfg.Stream.TLSListen = "", ""
	cfg.HTTP.Listen, cfg.Prometheus.Listen = "", ""
	for _, m := range mutate {
		m(&cfg)
	}
	b := &broker{t: t, cfg: cfg, log: log}
	b.start()
	t.Cleanup(b.stop)
	return b
}

func (b *broker) start() {
	b.t.Helper()
	log := b.log
	if log == nil && os.Getenv("TRIDENT_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	n, err := node.Start(b.cfg, log)
	if err != nil {
		b.t.Fatalf("start broker: %v", err)
	}
	b.n = n
	b.Addr = n.AMQPAddr().String()
	b.URL = fmt.Sprintf("amqp://guest:guest@%s/", b.Addr)
	// Later restarts reuse the same port.
	b.cfg.AMQP.Listen = b.Addr
}

func (b *broker) stop() {
	if b.n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.n.Close(ctx)
	b.n = nil
}

// restart stops the node gracefully and starts it again on the same data
// dir and port.
func (b *broker) restart() {
	b.t.Helper()
	b.stop()
	b.start()
}

// dial opens a connection that is closed when the test ends.
func dial(t testing.TB, url string) *amqp.Connection {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// channel opens a channel on a new connection.
func channel(t testing.TB, url string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	c := dial(t, url)
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return c, ch
}

// amqpCode returns the reply code of an *amqp.Error, or 0.
func amqpCode(err error) int {
	if e, ok := err.(*amqp.Error); ok {
		return e.Code
	}
	return 0
}

// receive waits for one delivery.
func receive(t testing.TB, ds <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	select {
	case d, ok := <-ds:
		if !ok {
			t.Fatalf("delivery channel closed")
		}
		return d
	case <-time.After(5 * time.Second):
		t.Fatalf("timeout waiting for a delivery")
	}
	return amqp.Delivery{}
}

// noDelivery asserts that nothing arrives within d.
func noDelivery(t testing.TB, ds <-chan amqp.Delivery, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-ds:
		if ok {
			t.Fatalf("unexpected delivery %q", m.Body)
		}
	case <-time.After(d):
	}
}
