package main

// The quorum backlog benchmark (--backlog N --backlog-quorum): the backlog
// benchmark on a quorum queue of a local 3-node cluster (cluster.go). The
// queue is filled through its leader; then every node is killed with
// SIGKILL and all are restarted at once; then the queue is drained through
// its leader. Memory figures are the highest of the three nodes (the
// leader's, in practice: followers hold no message in memory either), the
// restart time runs until node 0's passive queue.declare returns N, and
// disk is the three data directories together.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func backlogQuorum(ctx context.Context, o *options, n int) (backlogResult, error) {
	r := backlogResult{name: clusterTargetName + " quorum", n: n, settle: o.backlogSettle}
	c, err := startCluster(ctx, o.tridentBin, "leader", o.clusterProf)
	if err != nil {
		return r, err
	}
	defer c.stop()
	args := amqp.Table{"x-queue-type": "quorum"}
	conn, ch, err := openChannel(c.nodes[0].p.AMQPURL, "backlog declare")
	if err != nil {
		return r, err
	}
	_, err = ch.QueueDeclare(backlogQueue, true, false, false, false, args)
	conn.Close()
	if err != nil {
		return r, err
	}
	li, err := c.leader(ctx, backlogQueue, 30*time.Second)
	if err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "tridentbench: quorum queue led by %s\n", c.nodes[li].name)
	sample := func() []*rssSampler {
		var ms []*rssSampler
		for _, nd := range c.nodes {
			ms = append(ms, startRSS(nd.p.Pid))
		}
		return ms
	}
	stop := func(ms []*rssSampler) {
		for i, m := range ms {
			m.stop()
			r.peakRSS = max(r.peakRSS, m.peak, hwm(c.nodes[i].p.Pid()))
			r.peakAnon = max(r.peakAnon, m.peakAnon)
		}
	}
	rssAll := func() int64 {
		var top int64
		for _, nd := range c.nodes {
			top = max(top, rss(nd.p.Pid()))
		}
		return top
	}
	disk := func() int64 {
		var sum int64
		for _, nd := range c.nodes {
			sum += dirSize(nd.p.DataDir)
		}
		return sum
	}
	// Where the disk goes, on stderr: each node's top directories.
	du := func(when string) {
		for _, nd := range c.nodes {
			ents, _ := os.ReadDir(nd.p.DataDir)
			var parts []string
			for _, e := range ents {
				parts = append(parts, e.Name()+" "+mib(dirSize(filepath.Join(nd.p.DataDir, e.Name()))))
			}
			fmt.Fprintf(os.Stderr, "tridentbench: %s, %s: %s\n", when, nd.name, strings.Join(parts, ", "))
		}
	}
	ms := sample()
	if r.fillTenths, r.fillRate, err = backlogFill(ctx, c.nodes[li].p.AMQPURL, n, o.params.MsgSize, args); err != nil {
		return r, err
	}
	r.rssFilled = rssAll()
	r.fileFilled = procStatus(c.nodes[li].p.Pid(), "RssFile")
	stop(ms)
	r.diskFilled = disk()
	du("filled")

	fmt.Fprintln(os.Stderr, "tridentbench: kill -9 every node and restart them")
	for _, nd := range c.nodes {
		if err := nd.p.Kill(); err != nil {
			return r, err
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, nd := range c.nodes {
		wg.Go(func() { errs[i] = nd.p.Restart() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return r, err
		}
	}
	r.toServe = time.Since(start)
	r.restarted = true
	for {
		count, err := passiveCount(c.nodes[0].p.AMQPURL)
		if err == nil && count >= n {
			r.countAfter = count
			break
		}
		if time.Since(start) > 10*time.Minute {
			return r, fmt.Errorf("queue holds %d after the restart (%v), want %d", count, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.toCount = time.Since(start)
	r.rssRestarted = rssAll()
	if li, err = c.leader(ctx, backlogQueue, 30*time.Second); err != nil {
		return r, err
	}
	ms = sample()
	if r.drainTenths, r.drainRate, r.drained, err = backlogDrain(ctx, c.nodes[li].p.AMQPURL, n, o.params.Prefetch, o.params.AckEvery); err != nil {
		return r, err
	}
	stop(ms)
	r.rssDrained = rssAll()
	r.diskDrained = disk()
	du("drained")
	if o.backlogSettle > 0 {
		fmt.Fprintf(os.Stderr, "tridentbench: waiting %v for the stores to give disk back\n", o.backlogSettle)
		select {
		case <-time.After(o.backlogSettle):
		case <-ctx.Done():
			return r, ctx.Err()
		}
		r.diskSettled = disk()
		du("settled")
	}
	return r, nil
}
