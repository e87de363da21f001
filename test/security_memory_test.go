package test

import (
	"bufio"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-stomp/stomp/v3"

	"github.com/trident-broker/trident/test/testbin"
)

// Issue 38, F10: the memory alarm measures live memory, clears once the
// load is gone, and bounds a slow consumer's backlog.

// procRSS reads a process's resident set (VmRSS) and its peak (VmHWM), in
// bytes.
func procRSS(pid int) (rss, hwm int64) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// flood publishes transient bodies of size bytes to queue from n
// connections until stop is closed, and counts what it sent.
func flood(t *testing.T, url, queue string, n, size int, persistent bool, stop <-chan struct{}) (sent *atomic.Int64, wait func()) {
	sent = new(atomic.Int64)
	var wg sync.WaitGroup
	mode := amqp.Transient
	if persistent {
		mode = amqp.Persistent
	}
	for range n {
		// A publisher blocked by the alarm sits in a socket write that
		// no connection.close gets through: stop closes the socket.
		var nc net.Conn
		conn, err := amqp.DialConfig(url, amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, 5*time.Second)
			nc = c
			return c, err
		}})
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := make([]byte, size)
			go func() { <-stop; nc.Close() }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{DeliveryMode: mode, Body: body}); err != nil {
					return
				}
				sent.Add(1)
			}
		}()
	}
	return sent, wg.Wait
}

// slowConsumer consumes queue with a prefetch of 10, acking one message
// every millisecond, until its connection closes.
func slowConsumer(t *testing.T, url, queue string) (got *atomic.Int64) {
	got = new(atomic.Int64)
	_, ch := channel(t, url)
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range ds {
			time.Sleep(time.Millisecond)
			_ = d.Ack(false)
			got.Add(1)
		}
	}()
	return got
}

// sampleRSS samples a process's resident size every 20ms until the
// returned function is called, which returns the peak (the larger of the
// samples and the kernel's VmHWM).
func sampleRSS(pid int) (stop func() int64) {
	return samplePeak(20*time.Millisecond, func() int64 { rss, hwm := procRSS(pid); return max(rss, hwm) })
}

// memoryLog returns the lines of p's log about memory.
func memoryLog(p *testbin.Proc) string {
	data, _ := os.ReadFile(p.LogPath)
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "memory") && !strings.Contains(l, "publishing blocked") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSecurityF10PeakBounded floods a queue with a slow consumer for 5 s
// from four connections (two transient, two persistent, 4 KiB bodies)
// under a 400 MB watermark: the broker's resident size (its own process,
// VmRSS and VmHWM) stays within 1.25 × the watermark.
func TestSecurityF10PeakBounded(t *testing.T) {
	const watermark = 400_000_000
	p := testbin.Start(t, "--memory-high-watermark-bytes", strconv.Itoa(watermark))
	_, ch := channel(t, p.AMQPURL)
	if _, err := ch.QueueDeclare("f10", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	got := slowConsumer(t, p.AMQPURL, "f10")
	peak := sampleRSS(p.Pid())
	stop := make(chan struct{})
	transient, wait1 := flood(t, p.AMQPURL, "f10", 2, 4096, false, stop)
	persistent, wait2 := flood(t, p.AMQPURL, "f10", 2, 4096, true, stop)
	time.Sleep(5 * time.Second)
	close(stop)
	wait1()
	wait2()
	peakRSS := peak()
	t.Logf("sent %d transient, %d persistent; consumed %d; peak RSS %d MB, watermark %d MB",
		transient.Load(), persistent.Load(), got.Load(), peakRSS/1_000_000, watermark/1_000_000)
	if peakRSS > watermark*5/4 {
		t.Fatalf("peak RSS %d MB, more than 1.25 × the %d MB watermark\n%s", peakRSS/1_000_000, watermark/1_000_000, memoryLog(p))
	}
}

// TestSecurityF10AlarmClears fills memory with a transient backlog that
// the queues keep in RAM (no paging, a large queue budget) until the
// memory alarm fires and the publishers get connection.blocked; deleting
// the queue clears the alarm within seconds, and connection.unblocked
// arrives.
func TestSecurityF10AlarmClears(t *testing.T) {
	const watermark = 200_000_000
	p := testbin.Start(t, "--memory-high-watermark-bytes", strconv.Itoa(watermark),
		"--queues-memory-paging-percent", "0", "--queues-memory-budget", "4000000000")
	_, ch := channel(t, p.AMQPURL)
	if _, err := ch.QueueDeclare("f10-clear", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	watcher := dial(t, p.AMQPURL) // a publisher that sees the alarm
	wch, err := watcher.Channel()
	if err != nil {
		t.Fatal(err)
	}
	blockings := watcher.NotifyBlocked(make(chan amqp.Blocking, 4))
	stop := make(chan struct{})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()
	sent, wait := flood(t, p.AMQPURL, "f10-clear", 2, 16<<10, false, stop)
	deadline := time.After(60 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	publish := func() {
		_ = wch.PublishWithContext(context.Background(), "", "f10-clear", false, false, amqp.Publishing{Body: []byte("x")})
	}
wait:
	for {
		select {
		case b := <-blockings:
			if !b.Active || b.Reason != "low on memory" {
				t.Fatalf("got %+v, want connection.blocked 'low on memory'", b)
			}
			break wait
		case <-tick.C:
			publish() // the broker tells a publisher, when it next publishes
		case <-deadline:
			t.Fatalf("no connection.blocked after %d messages of 16 KiB\n%s", sent.Load(), memoryLog(p))
		}
	}
	close(stop)
	wait()
	t.Logf("blocked after %d messages of 16 KiB", sent.Load())
	_, ch = channel(t, p.AMQPURL)
	if _, err := ch.QueueDelete("f10-clear", false, false, false); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case b := <-blockings:
		if b.Active {
			t.Fatalf("got %+v, want connection.unblocked", b)
		}
		t.Logf("unblocked %v after the queue was deleted", time.Since(deleted).Round(10*time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("still blocked 10 s after the queue was deleted\n%s", memoryLog(p))
	}
	rss, _ := procRSS(p.Pid())
	t.Logf("RSS after the alarm cleared: %d MB", rss/1_000_000)
}

// TestSecurityF10PeakBoundedSTOMP is TestSecurityF10PeakBounded with the
// flood over STOMP (four connections, SEND without receipts, 4 KiB
// bodies) and the slow consumer over AMQP.
func TestSecurityF10PeakBoundedSTOMP(t *testing.T) {
	const watermark = 400_000_000
	port, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := testbin.Start(t, "--memory-high-watermark-bytes", strconv.Itoa(watermark), "--stomp-listen", addr)
	_, ch := channel(t, p.AMQPURL)
	if _, err := ch.QueueDeclare("f10s", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	got := slowConsumer(t, p.AMQPURL, "f10s")
	peak := sampleRSS(p.Pid())
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := stomp.Connect(nc, stomp.ConnOpt.Login("guest", "guest"), stomp.ConnOpt.Host("/"), stomp.ConnOpt.HeartBeat(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			go func() { <-stop; nc.Close() }()
			body := make([]byte, 4096)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := sc.Send("/amq/queue/f10s", "application/octet-stream", body); err != nil {
					return
				}
				sent.Add(1)
			}
		}()
	}
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()
	peakRSS := peak()
	t.Logf("sent %d over STOMP; consumed %d; peak RSS %d MB, watermark %d MB", sent.Load(), got.Load(), peakRSS/1_000_000, watermark/1_000_000)
	if peakRSS > watermark*5/4 {
		t.Fatalf("peak RSS %d MB, more than 1.25 × the %d MB watermark\n%s", peakRSS/1_000_000, watermark/1_000_000, memoryLog(p))
	}
}
