package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// STOMP scenarios (github.com/go-stomp/stomp/v3, each client on its own
// connection, transient messages, auto-ack subscriptions):
//
//	stomp-queue-1to1     1 publisher → 1 subscriber through /queue/NAME
//	stomp-topic-fanout   1 publisher → 10 subscribers of /topic/KEY; consumed/s
//	                     counts every subscriber's deliveries
var stompScenarios = []Scenario{
	stompScenario{name: "stomp-queue-1to1", subscribers: 1},
	stompScenario{name: "stomp-topic-fanout", subscribers: 10, topic: true},
}

// stompListener is the STOMP listener of a self-started trident.
var stompListener = listener{scheme: "stomp", flag: "--stomp-listen", urlFormat: "stomp://guest:guest@%s/"}

// stompAnchorURL is the anchor RabbitMQ's STOMP listener.
const stompAnchorURL = "stomp://guest:guest@127.0.0.1:61614/"

type stompScenario struct {
	name        string
	subscribers int
	topic       bool
}

func (s stompScenario) Name() string   { return s.name }
func (s stompScenario) Scheme() string { return "stomp" }

// stompDial connects to stomp://user:pass@host:port/vhost (vhost "/" when
// the path is empty), as RabbitMQ expects the vhost in the host header.
func stompDial(raw string) (*stomp.Conn, error) {
	nc, u, vhost, user, pass, err := stompDialTCP(raw)
	if err != nil {
		return nil, err
	}
	c, err := stomp.Connect(nc, stomp.ConnOpt.Host(vhost), stomp.ConnOpt.Login(user, pass),
		stomp.ConnOpt.HeartBeat(0, 0), stomp.ConnOpt.ReadChannelCapacity(4096), stomp.ConnOpt.WriteChannelCapacity(4096))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("stomp connect %s: %w", u.Host, err)
	}
	return c, nil
}

// stompDialTCP dials the host of a stomp:// URL and returns the URL and
// its login (stompLogin).
func stompDialTCP(raw string) (nc net.Conn, u *url.URL, vhost, user, pass string, err error) {
	if u, err = url.Parse(raw); err != nil {
		return nil, nil, "", "", "", err
	}
	vhost, user, pass = stompLogin(u)
	if nc, err = net.DialTimeout("tcp", u.Host, 10*time.Second); err != nil {
		return nil, nil, "", "", "", fmt.Errorf("dial %s: %w", u.Host, err)
	}
	return nc, u, vhost, user, pass, nil
}

// stompLogin is the vhost ("/" when the path is empty), user and password
// (guest/guest unless given) of a stomp:// URL.
func stompLogin(u *url.URL) (vhost, user, pass string) {
	vhost = strings.TrimPrefix(u.Path, "/")
	if vhost == "" {
		vhost = "/"
	}
	user, pass = "guest", "guest"
	if u.User != nil {
		user = u.User.Username()
		if p, ok := u.User.Password(); ok {
			pass = p
		}
	}
	return vhost, user, pass
}

func (s stompScenario) Run(ctx context.Context, raw string, p Params) (Result, error) {
	var dest string
	var qhdrs []func(*frame.Frame) error
	pubDest := ""
	if s.topic {
		dest = "/topic/tridentbench." + randomSuffix()
		pubDest = dest
	} else {
		// The subscriber declares a non-durable auto-delete queue, which
		// goes away with it; the publisher sends to it without declaring.
		name := "tridentbench." + s.name + "." + randomSuffix()
		dest, pubDest = "/queue/"+name, "/amq/queue/"+name
		qhdrs = []func(*frame.Frame) error{stomp.SubscribeOpt.Header("durable", "false"), stomp.SubscribeOpt.Header("auto-delete", "true")}
	}

	var c counters
	errc := make(chan error, s.subscribers+2)
	var wg sync.WaitGroup
	var conns []*stomp.Conn
	defer func() {
		for _, conn := range conns {
			_ = conn.MustDisconnect()
		}
	}()

	for i := 0; i < s.subscribers; i++ {
		conn, err := stompDial(raw)
		if err != nil {
			return Result{}, err
		}
		conns = append(conns, conn)
		sub, err := conn.Subscribe(dest, stomp.AckAuto, qhdrs...)
		if err != nil {
			return Result{}, fmt.Errorf("subscribe %s: %w", dest, err)
		}
		// A receipt on the same connection: the SUBSCRIBE is in place.
		if err := conn.Send("/topic/tridentbench.sync", "", nil, stomp.SendOpt.Receipt); err != nil {
			return Result{}, fmt.Errorf("sync: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range sub.C {
				if m.Err != nil {
					c.fail(errc, fmt.Errorf("subscription: %w", m.Err))
					return
				}
				c.consumed.Add(1)
			}
		}()
	}
	pub, err := stompDial(raw)
	if err != nil {
		return Result{}, err
	}
	conns = append(conns, pub)

	body := make([]byte, p.MsgSize)
	fan := uint64(s.subscribers)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var sent uint64
		for !c.stop.Load() {
			if sent%inFlightCheckEvery == 0 {
				for sent-c.consumed.Load()/fan >= p.MaxInFlight {
					if c.stop.Load() {
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			if err := pub.Send(pubDest, "", body); err != nil {
				c.fail(errc, fmt.Errorf("send: %w", err))
				return
			}
			sent++
			c.published.Add(1)
		}
	}()

	res, err := measure(ctx, &c, p, errc)
	c.stop.Store(true)
	for _, conn := range conns {
		_ = conn.MustDisconnect()
	}
	conns = nil
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		if err == nil {
			err = errors.New("stomp workers did not stop")
		}
	}
	return res, err
}
