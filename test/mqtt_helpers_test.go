package test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// startMQTTBroker starts an in-process node with MQTT on TCP and WebSocket.
func startMQTTBroker(t testing.TB, mutate ...func(*conf.Config)) *broker {
	t.Helper()
	return startBroker(t, append([]func(*conf.Config){func(c *conf.Config) {
		c.MQTT.Listen, c.MQTT.WSListen = "127.0.0.1:0", "127.0.0.1:0"
		anonMQTT(c) // many tests connect without credentials
	}}, mutate...)...)
}

func (b *broker) mqttAddr() string { return b.n.MQTTAddr().String() }

// msg3 is a message received by a v3 client.
type msg3 struct {
	topic   string
	payload string
	qos     byte
	retain  bool
	dup     bool
}

// client3 is a paho.mqtt.golang (MQTT 3.1.1) client with a channel of
// received messages.
type mqttOpts = mqtt3.ClientOptions

type client3 struct {
	mqtt3.Client
	msgs chan msg3
}

// dial3 connects a v3.1.1 client to url (tcp://host:port or ws://host:port/ws).
func dial3(t testing.TB, url, id string, clean bool, opts ...func(*mqtt3.ClientOptions)) *client3 {
	t.Helper()
	c, err := tryDial3(url, id, clean, opts...)
	if err != nil {
		t.Fatalf("mqtt connect %s as %q: %v", url, id, err)
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c
}

func tryDial3(url, id string, clean bool, opts ...func(*mqtt3.ClientOptions)) (*client3, error) {
	c := &client3{msgs: make(chan msg3, 10000)}
	o := mqtt3.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(clean).
		SetAutoReconnect(false).SetConnectRetry(false).SetProtocolVersion(4).
		SetConnectTimeout(5 * time.Second).SetOrderMatters(true).
		SetDefaultPublishHandler(func(_ mqtt3.Client, m mqtt3.Message) {
			c.msgs <- msg3{topic: m.Topic(), payload: string(m.Payload()), qos: m.Qos(), retain: m.Retained(), dup: m.Duplicate()}
		})
	for _, f := range opts {
		f(o)
	}
	c.Client = mqtt3.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, fmt.Errorf("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *client3) subscribe(t testing.TB, filter string, qos byte) {
	t.Helper()
	tok := c.Subscribe(filter, qos, nil)
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tok.Error())
	}
	st := tok.(*mqtt3.SubscribeToken)
	if got := st.Result()[filter]; got != qos {
		t.Fatalf("subscribe %s: granted %d, want %d", filter, got, qos)
	}
}

func (c *client3) publish(t testing.TB, topic string, qos byte, retain bool, payload string) {
	t.Helper()
	tok := c.Publish(topic, qos, retain, payload)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tok.Error())
	}
}

func (c *client3) receive(t testing.TB) msg3 {
	t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("timeout waiting for an MQTT message")
	}
	return msg3{}
}

func (c *client3) none(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case m := <-c.msgs:
		t.Fatalf("unexpected MQTT message %+v", m)
	case <-time.After(d):
	}
}

// client5 is a paho.golang (MQTT 5) client.
type client5 struct {
	*paho.Client
	msgs chan *paho.Publish
	disc chan *paho.Disconnect
	mu   sync.Mutex
}

func dial5(t testing.TB, addr string, cp *paho.Connect) (*client5, *paho.Connack) {
	t.Helper()
	c, ack, err := tryDial5(addr, cp)
	if err != nil {
		t.Fatalf("mqtt5 connect %s: %v (%+v)", addr, err, ack)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, ack
}

func tryDial5(addr string, cp *paho.Connect) (*client5, *paho.Connack, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	c := &client5{msgs: make(chan *paho.Publish, 10000), disc: make(chan *paho.Disconnect, 1)}
	c.Client = paho.NewClient(paho.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(r paho.PublishReceived) (bool, error) {
			c.msgs <- r.Packet
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case c.disc <- d:
			default:
			}
		},
	})
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.Connect(ctx, cp)
	if err != nil {
		nc.Close()
		return nil, ack, err
	}
	return c, ack, nil
}

func (c *client5) subscribe(t testing.TB, subs ...paho.SubscribeOptions) *paho.Suback {
	t.Helper()
	return c.subscribeWith(t, nil, subs...)
}

func (c *client5) subscribeWith(t testing.TB, props *paho.SubscribeProperties, subs ...paho.SubscribeOptions) *paho.Suback {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs, Properties: props})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	return sa
}

func (c *client5) publish(t testing.TB, p *paho.Publish) *paho.PublishResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, p)
	if err != nil {
		t.Fatalf("publish %s: %v", p.Topic, err)
	}
	return r
}

func (c *client5) receive(t testing.TB) *paho.Publish {
	t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("timeout waiting for an MQTT 5 message")
	}
	return nil
}

func (c *client5) none(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case m := <-c.msgs:
		t.Fatalf("unexpected MQTT 5 message on %s: %q", m.Topic, m.Payload)
	case <-time.After(d):
	}
}

func u32(v uint32) *uint32 { return &v }
func u16(v uint16) *uint16 { return &v }

// anonMQTT turns anonymous MQTT on as many tests assume it, with a user
// of its own (never the bootstrap user): testbin.AnonMQTTUser, with full
// permissions on "/", imported at boot from a definitions file.
func anonMQTT(c *conf.Config) {
	c.MQTT.AllowAnonymous = true
	c.MQTT.DefaultUser, c.MQTT.DefaultPass = testbin.AnonMQTTUser, testbin.AnonMQTTPass
	c.Definitions = testbin.AnonDefinitions()
}
