package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// MQTT scenarios (github.com/eclipse/paho.mqtt.golang, MQTT 3.1.1, each
// client on its own connection, clean sessions):
//
//	mqtt-qos0-1to1       1 publisher → 1 subscriber, QoS 0
//	mqtt-qos1-1to1       1 publisher → 1 subscriber, QoS 1 (published/s counts PUBACKs;
//	                     at most --confirm-window unacknowledged)
//	mqtt-qos0-fanout100  1 publisher → 100 subscribers of one topic, QoS 0;
//	                     consumed/s counts every subscriber's deliveries
//	mqtt-qos1-fanout100  the same at QoS 1
//	mqtt-idle-10k        opens 10,000 idle MQTT connections and prints the
//	                     broker's resident memory per connection (the broker
//	                     must run on this machine; its process is found by
//	                     its listening port)
//
// Mosquitto from ../shared/anchors is a target with
// --target mosquitto=mqtt://127.0.0.1:1885.
var mqttScenarios = []Scenario{
	mqttScenario{name: "mqtt-qos0-1to1", qos: 0, subscribers: 1},
	mqttScenario{name: "mqtt-qos1-1to1", qos: 1, subscribers: 1},
	mqttScenario{name: "mqtt-qos0-fanout100", qos: 0, subscribers: 100},
	mqttScenario{name: "mqtt-qos1-fanout100", qos: 1, subscribers: 100},
	mqttIdleScenario{name: "mqtt-idle-10k", conns: 10000},
}

// mqttListeners are the MQTT listeners of a self-started trident.
var mqttListeners = []listener{
	{scheme: "mqtt", flag: "--mqtt-listen", urlFormat: "mqtt://guest:guest@%s"},
	{scheme: "mqtt-ws", flag: "--mqtt-ws-listen", urlFormat: "ws://%s/ws"},
}

// mqttAnchorURL is the anchor RabbitMQ's MQTT listener.
const mqttAnchorURL = "mqtt://guest:guest@127.0.0.1:1884"

type mqttScenario struct {
	name        string
	qos         byte
	subscribers int
}

func (s mqttScenario) Name() string   { return s.name }
func (s mqttScenario) Scheme() string { return "mqtt" }

// mqttDial connects a clean-session client to mqtt://[user:pass@]host:port.
func mqttDial(raw, id string, handler mqtt.MessageHandler) (mqtt.Client, error) {
	return mqttDialSession(raw, id, true, handler)
}

// mqttDialSession is mqttDial with a clean or a persistent session.
func mqttDialSession(raw, id string, clean bool, handler mqtt.MessageHandler) (mqtt.Client, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	o := mqtt.NewClientOptions().AddBroker("tcp://" + u.Host).SetClientID(id).SetCleanSession(clean).
		SetAutoReconnect(false).SetConnectTimeout(10 * time.Second).SetOrderMatters(false).
		SetMaxResumePubInFlight(0).SetWriteTimeout(0).SetKeepAlive(60 * time.Second)
	if u.User != nil {
		o.SetUsername(u.User.Username())
		if p, ok := u.User.Password(); ok {
			o.SetPassword(p)
		}
	}
	if handler != nil {
		o.SetDefaultPublishHandler(handler)
	}
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(15 * time.Second) {
		return nil, fmt.Errorf("mqtt connect %s: timeout", u.Host)
	}
	if err := tok.Error(); err != nil {
		return nil, fmt.Errorf("mqtt connect %s: %w", u.Host, err)
	}
	return c, nil
}

func (s mqttScenario) Run(ctx context.Context, raw string, p Params) (Result, error) {
	topic := "tridentbench/" + s.name + "/" + randomSuffix()
	var c counters
	errc := make(chan error, 4)
	var subs []mqtt.Client
	defer func() {
		for _, sc := range subs {
			sc.Disconnect(50)
		}
	}()
	handler := func(mqtt.Client, mqtt.Message) { c.consumed.Add(1) }
	for i := 0; i < s.subscribers; i++ {
		sc, err := mqttDial(raw, fmt.Sprintf("tb-sub-%s-%d", randomSuffix(), i), handler)
		if err != nil {
			return Result{}, err
		}
		subs = append(subs, sc)
		tok := sc.Subscribe(topic, s.qos, nil)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			return Result{}, fmt.Errorf("subscribe: %v", tok.Error())
		}
	}
	pub, err := mqttDial(raw, "tb-pub-"+randomSuffix(), nil)
	if err != nil {
		return Result{}, err
	}
	defer pub.Disconnect(50)

	body := make([]byte, p.MsgSize)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		window := make([]mqtt.Token, 0, p.ConfirmWindow)
		fan := uint64(s.subscribers)
		var sent uint64
		for !c.stop.Load() {
			if sent%inFlightCheckEvery == 0 {
				for !c.stop.Load() && sent-c.consumed.Load()/fan > p.MaxInFlight {
					time.Sleep(50 * time.Microsecond)
				}
			}
			tok := pub.Publish(topic, s.qos, false, body)
			sent++
			if s.qos == 0 {
				c.published.Add(1)
				continue
			}
			window = append(window, tok)
			if len(window) == cap(window) {
				head := window[0]
				if !head.WaitTimeout(30 * time.Second) {
					c.fail(errc, errors.New("no PUBACK within 30s"))
					return
				}
				if err := head.Error(); err != nil {
					c.fail(errc, err)
					return
				}
				c.published.Add(1)
				window = append(window[:0], window[1:]...)
			}
		}
	}()
	res, err := measure(ctx, &c, p, errc)
	c.stop.Store(true)
	wg.Wait()
	return res, err
}

// mqttIdleScenario measures the broker's resident memory per idle
// connection.
type mqttIdleScenario struct {
	name  string
	conns int
}

func (s mqttIdleScenario) Name() string   { return s.name }
func (s mqttIdleScenario) Scheme() string { return "mqtt" }

// localBroker parses a broker URL and finds the process listening on its
// port (it must run on this machine), and the URL's user and password.
func localBroker(scenario, raw string) (u *url.URL, pid int, user, pass string, err error) {
	if u, err = url.Parse(raw); err != nil {
		return nil, 0, "", "", err
	}
	_, portStr, _ := net.SplitHostPort(u.Host)
	port, _ := strconv.Atoi(portStr)
	if pid, err = pidListening(port); err != nil {
		return nil, 0, "", "", fmt.Errorf("%s: %w (the broker must run on this machine)", scenario, err)
	}
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	return u, pid, user, pass, nil
}

func (s mqttIdleScenario) Run(ctx context.Context, raw string, _ Params) (Result, error) {
	u, pid, user, pass, err := localBroker(s.name, raw)
	if err != nil {
		return Result{}, err
	}
	time.Sleep(500 * time.Millisecond)
	before, err := rssKB(pid)
	if err != nil {
		return Result{}, err
	}
	conns := make([]net.Conn, 0, s.conns)
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	start := time.Now()
	for i := 0; i < s.conns; i++ {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		nc, err := rawMQTTConnect(u.Host, fmt.Sprintf("idle-%d-%s", i, randomSuffix()), user, pass)
		if err != nil {
			return Result{}, fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, nc)
	}
	elapsed := time.Since(start)
	time.Sleep(2 * time.Second)
	after, err := rssKB(pid)
	if err != nil {
		return Result{}, err
	}
	per := float64(after-before) / float64(s.conns)
	fmt.Fprintf(os.Stderr, "\n%s: pid %d RSS %d KB → %d KB for %d idle connections: %.1f KB per connection\n",
		s.name, pid, before, after, s.conns, per)
	return Result{Published: uint64(s.conns), Elapsed: elapsed, PublishRate: float64(s.conns) / elapsed.Seconds(),
		ConsumeRate: per}, nil
}

// rawMQTTConnect opens an MQTT 3.1.1 connection (keep-alive 0) and waits
// for a successful CONNACK.
func rawMQTTConnect(addr, id, user, pass string) (net.Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(mqttConnectPacket(nil, id, user, pass)); err != nil {
		nc.Close()
		return nil, err
	}
	ack := make([]byte, 4)
	if _, err := io.ReadFull(nc, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		nc.Close()
		return nil, fmt.Errorf("connack %x: %v", ack, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, nil
}

// mqttConnectPacket appends a clean-session MQTT 3.1.1 CONNECT with
// keep-alive off.
func mqttConnectPacket(b []byte, id, user, pass string) []byte {
	var body []byte
	body = mqttString(body, "MQTT")
	flags := byte(0x02)
	if user != "" {
		flags |= 0xC0
	}
	body = append(body, 4, flags, 0, 0)
	body = mqttString(body, id)
	if user != "" {
		body = mqttString(body, user)
		body = mqttString(body, pass)
	}
	return mqttPacket(b, mqttConnect<<4, body)
}

// pidListening finds the process listening on TCP port (IPv4 or IPv6).
func pidListening(port int) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" { // LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil && int(p) == port {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("no listener on port %d", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if l, err := os.Readlink(fd); err == nil && inodes[l] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process owns the listener on port %d", port)
}

func rssKB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS")
}
