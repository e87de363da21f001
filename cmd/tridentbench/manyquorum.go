package main

// The many-quorum-queues benchmark (--many-quorum N, issue 16): a local
// 3-node cluster (cluster.go), N quorum queues declared concurrently from
// four channels on each node. It reports
//
//   - declare: until every queue.declare has returned, and until every
//     node's /api/queues names a leader for each of the N queues;
//   - idle CPU of each node (utime+stime from /proc/<pid>/stat) over
//     --many-quorum-idle with no client traffic, and each node's RSS;
//   - failover: the node leading the most queues is killed with SIGKILL;
//     then the time until both survivors name a surviving leader for every
//     queue, and until a persistent publish to every queue from a survivor
//     has been confirmed (a confirm on a quorum queue is a commit on a
//     majority: the new leader serves).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func manyQuorumName(i int) string { return fmt.Sprintf("tridentbench-qq-%05d", i) }

type manyQuorumResult struct {
	n             int
	declared, led time.Duration
	idleFor       time.Duration
	idleCPU       []float64 // cores, per node
	rssIdle       []int64
	leaders       []int // queues led, per node, before the kill
	killed        int
	reLed, served time.Duration
}

func runManyQuorum(ctx context.Context, o *options) error {
	done, err := buildTrident(ctx, o)
	if err != nil {
		return err
	}
	defer done()
	c, err := startCluster(ctx, o.tridentBin, "spread", o.clusterProf)
	if err != nil {
		return err
	}
	defer c.stop()
	r := manyQuorumResult{n: o.manyQuorum, idleFor: o.manyQuorumIdle}
	if err := r.declare(ctx, c); err != nil {
		return err
	}
	if err := r.idle(ctx, c); err != nil {
		return err
	}
	if err := r.failover(ctx, c); err != nil {
		return err
	}
	r.print()
	return nil
}

// declare declares the queues, four channels per node at once, and waits
// until every node names a leader for each.
func (r *manyQuorumResult) declare(ctx context.Context, c *localCluster) error {
	const perNode = 4
	workers := perNode * len(c.nodes)
	args := amqp.Table{"x-queue-type": "quorum"}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			conn, ch, err := openChannel(c.nodes[w%len(c.nodes)].p.AMQPURL, "many-quorum declare")
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			for i := w; i < r.n; i += workers {
				if _, err := ch.QueueDeclare(manyQuorumName(i), true, false, false, false, args); err != nil {
					errs <- fmt.Errorf("declare %s: %w", manyQuorumName(i), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	r.declared = time.Since(start)
	fmt.Fprintf(os.Stderr, "tridentbench: %d quorum queues declared in %v\n", r.n, r.declared.Round(time.Millisecond))
	if _, err := c.queueLeaders(ctx, r.n, -1, 120*time.Second); err != nil {
		return err
	}
	r.led = time.Since(start)
	fmt.Fprintf(os.Stderr, "tridentbench: every node names a leader for all of them after %v\n", r.led.Round(time.Millisecond))
	return nil
}

// idle lets the cluster settle for 5 s and measures each node's CPU.
func (r *manyQuorumResult) idle(ctx context.Context, c *localCluster) error {
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "tridentbench: measuring idle CPU for %v\n", r.idleFor)
	cpu, err := c.cpuOver(ctx, r.idleFor)
	if err != nil {
		return err
	}
	r.idleCPU = cpu
	for _, nd := range c.nodes {
		r.rssIdle = append(r.rssIdle, rss(nd.p.Pid()))
	}
	return nil
}

// failover kills the node leading the most queues and waits until every
// queue has a surviving leader and serves a confirmed publish.
func (r *manyQuorumResult) failover(ctx context.Context, c *localCluster) error {
	leaders, err := c.queueLeaders(ctx, r.n, -1, 30*time.Second)
	if err != nil {
		return err
	}
	r.leaders = make([]int, len(c.nodes))
	for _, li := range leaders {
		r.leaders[li]++
	}
	for i, n := range r.leaders {
		if n > r.leaders[r.killed] {
			r.killed = i
		}
	}
	fmt.Fprintf(os.Stderr, "tridentbench: leaders per node %v; SIGKILL %s\n", r.leaders, c.nodes[r.killed].name)
	if err := c.nodes[r.killed].p.Kill(); err != nil {
		return err
	}
	start := time.Now()
	if _, err := c.queueLeaders(ctx, r.n, r.killed, 120*time.Second); err != nil {
		return err
	}
	r.reLed = time.Since(start)
	fmt.Fprintf(os.Stderr, "tridentbench: every queue has a surviving leader after %v\n", r.reLed.Round(time.Millisecond))
	survivor := (r.killed + 1) % len(c.nodes)
	if err := publishEachConfirmed(c.nodes[survivor].p.AMQPURL, r.n, 120*time.Second); err != nil {
		return err
	}
	r.served = time.Since(start)
	fmt.Fprintf(os.Stderr, "tridentbench: a publish to every queue confirmed after %v\n", r.served.Round(time.Millisecond))
	return nil
}

// cpuOver returns the cores each running node used over d (0 for a node
// that is down).
func (c *localCluster) cpuOver(ctx context.Context, d time.Duration) ([]float64, error) {
	t0 := make([]int64, len(c.nodes))
	for i, nd := range c.nodes {
		if nd.p.Running() {
			t0[i], _ = cpuTicks(nd.p.Pid())
		}
	}
	start := time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return nil, err
	}
	secs := time.Since(start).Seconds()
	out := make([]float64, len(c.nodes))
	for i, nd := range c.nodes {
		if !nd.p.Running() {
			continue
		}
		t, err := cpuTicks(nd.p.Pid())
		if err != nil {
			return nil, err
		}
		out[i] = float64(t-t0[i]) / clockTick / secs
	}
	return out, nil
}

// queueLeaders polls /api/queues/%2F of every running node except down
// until each names, for every one of the n bench queues, the same leader,
// a node other than down, and returns the leader's node index per queue.
func (c *localCluster) queueLeaders(ctx context.Context, n, down int, timeout time.Duration) (map[string]int, error) {
	index := map[string]int{}
	for i, nd := range c.nodes {
		index[nd.name] = i
	}
	deadline := time.Now().Add(timeout)
	for {
		agreed, last := c.leadersOnce(ctx, index, n, down)
		if agreed != nil {
			return agreed, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("queues without an agreed leader after %v: %s", timeout, last)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func (c *localCluster) leadersOnce(ctx context.Context, index map[string]int, n, down int) (map[string]int, string) {
	var agreed map[string]int
	for i, nd := range c.nodes {
		if i == down {
			continue
		}
		var list []struct {
			Name   string `json:"name"`
			Leader string `json:"leader"`
		}
		if err := getJSONTimeout(ctx, nd.web, "/api/queues/%2F?columns=name,leader", &list, 10*time.Second); err != nil {
			return nil, fmt.Sprintf("%s: %v", nd.name, err)
		}
		mine := map[string]int{}
		for _, q := range list {
			if li, known := index[q.Leader]; known && li != down && strings.HasPrefix(q.Name, "tridentbench-qq-") {
				mine[q.Name] = li
			}
		}
		if len(mine) < n {
			return nil, fmt.Sprintf("%s names a live leader for %d of %d queues", nd.name, len(mine), n)
		}
		if agreed == nil {
			agreed = mine
			continue
		}
		for q, li := range mine {
			if agreed[q] != li {
				return nil, fmt.Sprintf("%s and another node name different leaders for %s", nd.name, q)
			}
		}
	}
	return agreed, ""
}

// publishEachConfirmed publishes one persistent message to every bench
// queue through url, from four channels in confirm mode, and retries a
// queue until its publish is confirmed (after a nack, or on a new channel
// after a channel error, while its group has no leader yet).
func publishEachConfirmed(url string, n int, timeout time.Duration) error {
	const workers = 4
	deadline := time.Now().Add(timeout)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			p := &confirmedPublisher{url: url}
			defer p.close()
			for i := w; i < n; i += workers {
				if err := p.publish(manyQuorumName(i), deadline); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

type confirmedPublisher struct {
	url  string
	conn *amqp.Connection
	ch   *amqp.Channel
}

func (p *confirmedPublisher) close() {
	if p.conn != nil {
		p.conn.Close()
		p.conn, p.ch = nil, nil
	}
}

func (p *confirmedPublisher) publish(queue string, deadline time.Time) error {
	var last error
	for time.Now().Before(deadline) {
		err := p.try(queue, deadline)
		if err == nil {
			return nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("publish to %s not confirmed: %v", queue, last)
}

func (p *confirmedPublisher) try(queue string, deadline time.Time) error {
	if p.ch == nil || p.ch.IsClosed() {
		p.close()
		conn, ch, err := openChannel(p.url, "many-quorum publish")
		if err != nil {
			return err
		}
		p.conn, p.ch = conn, ch
		if err := ch.Confirm(false); err != nil {
			p.close()
			return err
		}
	}
	dc, err := p.ch.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("x")})
	if err != nil {
		p.close()
		return err
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		p.close()
		return err
	}
	if !acked {
		return errors.New("nacked")
	}
	return nil
}

func (r *manyQuorumResult) print() {
	w := os.Stdout
	fmt.Fprintf(w, "many quorum queues: %d quorum queues on a local 3-node cluster\n\n", r.n)
	fmt.Fprintf(w, "  declare       %v (%s queues/s); every node names each queue's leader after %v\n",
		r.declared.Round(time.Millisecond), human(float64(r.n)/r.declared.Seconds()), r.led.Round(time.Millisecond))
	for i := range r.idleCPU {
		fmt.Fprintf(w, "  idle n%d       %5.1f%% of a core over %v, RSS %s, leads %d\n", i, 100*r.idleCPU[i], r.idleFor, mib(r.rssIdle[i]), r.leaders[i])
	}
	fmt.Fprintf(w, "  failover      SIGKILL n%d (%d leaders): every queue has a surviving leader after %v, a publish to each confirmed after %v\n",
		r.killed, r.leaders[r.killed], r.reLed.Round(time.Millisecond), r.served.Round(time.Millisecond))
}
