package node

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/trident-broker/trident/conf"
)

func testConfig(t *testing.T) conf.Config {
	t.Helper()
	cfg := conf.Default()
	cfg.DataDir = t.TempDir()
	cfg.AMQP.Listen = "127.0.0.1:0"
	cfg.MQTT = conf.MQTT{}
	cfg.STOMP = conf.STOMP{MaxHeaders: cfg.STOMP.MaxHeaders, MaxHeaderLength: cfg.STOMP.MaxHeaderLength, MaxFrameSizeUnauthenticated: cfg.STOMP.MaxFrameSizeUnauthenticated}
	cfg.HTTP.Listen = ""
	cfg.Prometheus.Listen = ""
	cfg.Stream.Listen, cfg.Stream.TLSListen = "", ""
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func closeNode(t *testing.T, n *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestStartCloseRestart(t *testing.T) {
	cfg := testConfig(t)
	n, err := Start(cfg, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	addr := n.AMQPAddr()
	if addr == nil {
		t.Fatal("AMQPAddr is nil")
	}
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c.Close()
	if _, ok := n.Broker().VHost("/"); !ok {
		t.Fatal("default vhost missing")
	}
	if err := n.Users().PutUser("bob", "pw", nil); err != nil {
		t.Fatal(err)
	}
	closeNode(t, n)
	if _, err := net.Dial("tcp", addr.String()); err == nil {
		t.Fatal("listener still accepting after Close")
	}

	// The store lock is released and state persisted.
	n, err = Start(cfg, nil)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer closeNode(t, n)
	if _, ok := n.Users().Lookup("bob"); !ok {
		t.Fatal("user lost across restart")
	}
	if _, err := n.Users().Authenticate("guest", "guest", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatalf("guest: %v", err)
	}
}

func TestAMQPDisabled(t *testing.T) {
	cfg := testConfig(t)
	cfg.AMQP.Listen = ""
	n, err := Start(cfg, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if n.AMQPAddr() != nil {
		t.Fatal("AMQPAddr should be nil when disabled")
	}
	closeNode(t, n)
}

// A failed start releases what it opened, so the next Start succeeds.
func TestStartFailureCleansUp(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := testConfig(t)
	cfg.AMQP.Listen = busy.Addr().String()
	if n, err := Start(cfg, nil); err == nil {
		closeNode(t, n)
		t.Fatal("Start on a busy port succeeded")
	}
	cfg.AMQP.Listen = "127.0.0.1:0"
	n, err := Start(cfg, nil)
	if err != nil {
		t.Fatalf("Start after failure: %v", err)
	}
	closeNode(t, n)
}
