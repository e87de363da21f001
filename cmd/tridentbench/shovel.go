package main

// The shovel benchmark (--shovel N, issue 13): N persistent messages of
// --size bytes are put in a durable queue of one Trident, then a dynamic
// shovel (ack-mode on-confirm, src-delete-after queue-length, prefetch
// --prefetch) moves them to a queue of a second local Trident; the figure is
// messages moved per second, from the shovel's declaration until the
// destination queue holds all N. With --shovel-rabbit-mgmt (the management
// API of a RabbitMQ with rabbitmq_shovel enabled, whose AMQP is
// --shovel-rabbit-amqp) the same N are moved by RabbitMQ's shovel between
// two queues of that broker, in the same run.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

const (
	shovelSrcQueue  = "tridentbench-shovel-src"
	shovelDestQueue = "tridentbench-shovel-dst"
)

func runShovel(ctx context.Context, o *options) error {
	n := o.shovel
	done, err := buildTrident(ctx, o)
	if err != nil {
		return err
	}
	defer done()
	dst, err := testbin.Launch(ctx, testbin.Options{Binary: o.tridentBin, ExtraArgs: o.tridentArgs})
	if err != nil {
		return err
	}
	defer dst.Cleanup()
	hp, err := testbin.FreePort()
	if err != nil {
		return err
	}
	mgmt := net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))
	src, err := testbin.Launch(ctx, testbin.Options{Binary: o.tridentBin, ExtraArgs: append([]string{"--http-listen", mgmt}, o.tridentArgs...)})
	if err != nil {
		return err
	}
	defer src.Cleanup()
	rate, err := shovelRun(ctx, o, src.AMQPURL, "http://"+mgmt, dst.AMQPURL, dst.AMQPURL, n)
	if err != nil {
		return fmt.Errorf("trident: %w", err)
	}
	fmt.Printf("shovel, %d persistent %d B messages, on-confirm, prefetch %d:\n", n, o.params.MsgSize, o.params.Prefetch)
	fmt.Printf("  trident → trident (two local nodes): %.0f msgs/s\n", rate)
	if o.shovelRabbitMgmt != "" {
		r, err := shovelRun(ctx, o, o.shovelRabbitAMQP, o.shovelRabbitMgmt, "amqp://", o.shovelRabbitAMQP, n)
		if err != nil {
			return fmt.Errorf("rabbitmq: %w", err)
		}
		fmt.Printf("  rabbitmq shovel, two queues of one node: %.0f msgs/s (trident %.2f×)\n", r, rate/r)
	}
	return nil
}

// shovelRun fills the source queue at srcURL, declares a shovel through
// the management API at mgmt to destURI (as the shovel sees it; destURL is
// how this process reaches it) and times the move.
func shovelRun(ctx context.Context, o *options, srcURL, mgmt, destURI, destURL string, n int) (float64, error) {
	conn, ch, err := openChannel(srcURL, "shovel bench publisher")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	for _, q := range []string{shovelSrcQueue, shovelDestQueue} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	if _, err := ch.QueueDeclare(shovelSrcQueue, true, false, false, false, nil); err != nil {
		return 0, err
	}
	if err := publishConfirmed(ctx, ch, n, max(o.params.MsgSize, 8), func(int) string { return shovelSrcQueue }, func(int) {}); err != nil {
		return 0, err
	}
	if destURL != srcURL {
		dc, dch, err := openChannel(destURL, "shovel bench cleanup")
		if err != nil {
			return 0, err
		}
		_, _ = dch.QueueDelete(shovelDestQueue, false, false, false)
		dc.Close()
	}
	def := map[string]any{"value": map[string]any{"src-uri": "amqp://", "src-queue": shovelSrcQueue,
		"dest-uri": destURI, "dest-queue": shovelDestQueue, "ack-mode": "on-confirm",
		"src-prefetch-count": o.params.Prefetch, "src-delete-after": "queue-length"}}
	body, _ := json.Marshal(def)
	req, err := http.NewRequestWithContext(ctx, "PUT", mgmt+"/api/parameters/shovel/%2F/tridentbench", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("declare shovel: HTTP %d", resp.StatusCode)
	}
	for {
		count, err := queueMessages(destURL, shovelDestQueue)
		if err == nil && count >= n {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return 0, fmt.Errorf("destination holds %d after 10 min (%v)", count, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	el := time.Since(start)
	fmt.Fprintf(os.Stderr, "tridentbench: %d moved in %v\n", n, el.Round(time.Millisecond))
	return float64(n) / el.Seconds(), nil
}

func queueMessages(url, queue string) (int, error) {
	c, err := amqp.Dial(url)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return q.Messages, err
}
