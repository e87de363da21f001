package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

// Rolling upgrades and feature flags (issue 39 item 6).

// previousRelease is the git tag of the release the rolling-upgrade test
// upgrades from.
const previousRelease = "v0.1.0"

// previousReleaseCommit is the commit previousRelease tags: a clone that
// did not fetch tags still holds it in its history (a shallow one does not).
const previousReleaseCommit = "9248e096b0eea32b289b96f8d7487814a5ab4c54"

// buildRelease builds cmd/trident as of tag into a temporary directory: the
// tag's tree (git archive) built with the shared module cache. A missing
// tag fails the test: the upgrade cannot be tested without it.
func buildRelease(t *testing.T, tag string) string {
	t.Helper()
	root, err := testbin.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	rev := tag
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", tag+"^{commit}").CombinedOutput(); err != nil {
		// Without the tag (a clone that fetched no tags), its commit.
		if tag != previousRelease {
			t.Fatalf("the release tag %s is missing from the repository: %v %s", tag, err, out)
		}
		if out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", previousReleaseCommit+"^{commit}").CombinedOutput(); err != nil {
			t.Fatalf("neither the release tag %s nor its commit %s is in the repository (a shallow clone? git fetch --tags --unshallow): %v %s",
				tag, previousReleaseCommit, err, out)
		}
		t.Logf("no tag %s here: building its commit %s", tag, previousReleaseCommit)
		rev = previousReleaseCommit
	} else if got := strings.TrimSpace(string(out)); tag == previousRelease && got != previousReleaseCommit {
		t.Fatalf("tag %s is %s, this test knows it as %s", tag, got, previousReleaseCommit)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", "git -C \"$1\" archive \"$2\" | tar -x -C \"$3\"", "sh", root, rev, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", tag, err, out)
	}
	bin := filepath.Join(dir, "trident-"+tag)
	build := exec.Command("go", "build", "-o", bin, "./cmd/trident")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", tag, err, out)
	}
	return bin
}

// featureFlag is one entry of GET /api/feature-flags.
type featureFlag struct {
	Name      string   `json:"name"`
	State     string   `json:"state"`
	Stability string   `json:"stability"`
	MissingOn []string `json:"missing_on"`
}

func flagOn(c *cnode, name string) (featureFlag, error) {
	var fs []featureFlag
	if _, err := c.tryAPI("GET", "/api/feature-flags", nil, &fs); err != nil {
		return featureFlag{}, err
	}
	for _, f := range fs {
		if f.Name == name {
			return f, nil
		}
	}
	return featureFlag{}, fmt.Errorf("%s: no feature flag %s in %v", c.name, name, fs)
}

// confirmedPublisher publishes persistent messages (body: a sequence
// number) with confirms to a queue, to whichever node answers, until
// stopped; it remembers the sequence numbers confirmed.
type confirmedPublisher struct {
	nodes []*cnode
	queue string

	mu        sync.Mutex
	confirmed map[int]bool
	nacked    int
	next      int
	last      time.Time     // the last confirm
	maxGap    time.Duration // the longest time without a confirm since resetGap
	conns     atomic.Int64  // connections made
}

// resetGap starts a new measure of the longest time without a confirm and
// returns the last one's, and the nacks so far.
func (p *confirmedPublisher) resetGap() (time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gap := time.Since(p.last); gap > p.maxGap {
		p.maxGap = gap
	}
	g := p.maxGap
	p.maxGap = 0
	return g, p.nacked
}

func (p *confirmedPublisher) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		nd := p.nodes[i%len(p.nodes)]
		if nd.p == nil || !nd.p.Running() {
			continue
		}
		p.session(ctx, nd)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// session publishes on one connection until it fails or ctx ends, in
// windows of 20 messages, each window's confirms awaited.
func (p *confirmedPublisher) session(ctx context.Context, nd *cnode) {
	conn, err := amqp.DialConfig(nd.url(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	if err := ch.Confirm(false); err != nil {
		return
	}
	p.conns.Add(1)
	for ctx.Err() == nil {
		type pending struct {
			seq int
			dc  *amqp.DeferredConfirmation
		}
		var window []pending
		for range 20 {
			p.mu.Lock()
			seq := p.next
			p.next++
			p.mu.Unlock()
			dc, err := ch.PublishWithDeferredConfirm("", p.queue, false, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(seq))})
			if err != nil {
				break
			}
			window = append(window, pending{seq, dc})
		}
		if len(window) == 0 {
			return
		}
		wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		failed := false
		for _, w := range window {
			ok, err := w.dc.WaitContext(wctx)
			p.mu.Lock()
			switch {
			case err != nil:
				failed = true // unknown: may or may not be stored
			case ok:
				p.confirmed[w.seq] = true
				now := time.Now()
				if !p.last.IsZero() && now.Sub(p.last) > p.maxGap {
					p.maxGap = now.Sub(p.last)
				}
				p.last = now
			default:
				p.nacked++
			}
			p.mu.Unlock()
		}
		cancel()
		if failed {
			return
		}
		time.Sleep(5 * time.Millisecond) // load, not a flood: the nodes restart meanwhile
	}
}

func (p *confirmedPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.confirmed)
}

// TestOpsRollingUpgrade starts a 3-node cluster of the previous release's
// binaries, publishes with confirms to a quorum queue throughout, and
// replaces each node in turn by this build (SIGTERM, the new binary on the
// same data directory). While a previous-release node is a member,
// feature_flags is unavailable and enabling it is refused, naming that
// node; declares made on old and new nodes reach every node. Once the
// last node runs this build the flag is disabled, is enabled on request,
// is enabled on every node and stays so across a restart. At the end
// every confirmed message is consumed: nothing confirmed is lost.
func TestOpsRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	oldBin := buildRelease(t, previousRelease)
	newBin, err := testbin.Binary()
	if err != nil {
		t.Fatal(err)
	}
	nodes := startClusterBin(t, oldBin, 3, nil)
	const queue = "upgrade-qq"
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}

	pub := &confirmedPublisher{nodes: nodes, queue: queue, confirmed: map[int]bool{}}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { pub.run(ctx) })
	defer func() { stop(); wg.Wait() }()
	eventually(t, 60*time.Second, "confirms before the upgrade", func() bool { return pub.count() >= 200 })

	var all []string
	for _, nd := range nodes {
		all = append(all, nd.name+"=true")
	}
	want := strings.Join(all, ",")
	ff := "feature_flags"
	_, nacks := pub.resetGap()
	for i, nd := range nodes {
		before := pub.count()
		if err := nd.p.Stop(); err != nil {
			t.Fatalf("stop %s (%s): %v", nd.name, previousRelease, err)
		}
		nd.p.Binary = newBin
		if err := nd.p.Restart(); err != nil {
			t.Fatalf("start %s on this build: %v", nd.name, err)
		}
		for _, o := range nodes {
			waitNodes(t, o.web, want, 90*time.Second)
		}
		gap, n := pub.resetGap()
		t.Logf("%s upgraded: %d messages confirmed, %d nacked meanwhile; longest time without a confirm %v (not asserted)",
			nd.name, pub.count()-before, n-nacks, gap.Round(time.Millisecond))
		nacks = n

		if i < len(nodes)-1 {
			old := nodes[len(nodes)-1] // still the previous release
			f, err := flagOn(nd, ff)
			if err != nil {
				t.Fatal(err)
			}
			if f.State != "unavailable" || !strings.Contains(strings.Join(f.MissingOn, " "), old.name) {
				t.Fatalf("with %s on %s: %s is %+v, want unavailable, missing on it", old.name, previousRelease, ff, f)
			}
			code, err := nd.tryAPI("PUT", "/api/feature-flags/"+ff+"/enable", map[string]any{}, nil)
			if code != 409 || err == nil || !strings.Contains(err.Error(), old.name) {
				t.Fatalf("enable %s with %s on %s: %d %v, want 409 naming it", ff, old.name, previousRelease, code, err)
			}
			// A mixed cluster keeps working: declares from a new node and
			// from an old one reach every node.
			_, chNew := dialNode(t, nd)
			_, chOld := dialNode(t, old)
			qNew, qOld := fmt.Sprintf("mixed-new-%d", i), fmt.Sprintf("mixed-old-%d", i)
			if _, err := chNew.QueueDeclare(qNew, true, false, false, false, nil); err != nil {
				t.Fatalf("declare on %s (new): %v", nd.name, err)
			}
			if _, err := chOld.QueueDeclare(qOld, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
				t.Fatalf("declare on %s (old): %v", old.name, err)
			}
			for _, o := range nodes {
				for _, q := range []string{qNew, qOld} {
					eventually(t, 30*time.Second, q+" on "+o.name, func() bool {
						code, err := o.tryAPI("GET", "/api/queues/%2F/"+url.PathEscape(q), nil, nil)
						return err == nil && code == 200
					})
				}
			}
		}
	}

	// Every node runs this build: the flag can be enabled.
	eventually(t, 60*time.Second, ff+" disabled (supported by all)", func() bool {
		f, err := flagOn(nodes[1], ff)
		return err == nil && f.State == "disabled"
	})
	if code, err := nodes[1].tryAPI("PUT", "/api/feature-flags/"+ff+"/enable", map[string]any{}, nil); err != nil || code != 204 {
		t.Fatalf("enable %s: %d %v", ff, code, err)
	}
	for _, o := range nodes {
		eventually(t, 30*time.Second, ff+" enabled on "+o.name, func() bool {
			f, err := flagOn(o, ff)
			return err == nil && f.State == "enabled"
		})
	}
	if err := nodes[0].p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, nodes[0].web, want, 90*time.Second)
	if f, err := flagOn(nodes[0], ff); err != nil || f.State != "enabled" {
		t.Fatalf("after a restart: %+v %v, want enabled", f, err)
	}
	after := pub.count()
	eventually(t, 60*time.Second, "confirms after the upgrade", func() bool { return pub.count() >= after+200 })
	stop()
	wg.Wait()

	// Nothing confirmed is lost.
	confirmed := pub.count()
	got := map[int]bool{}
	_, cch := dialNode(t, nodes[2])
	if err := cch.Qos(500, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs, err := cch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	missing := func() int {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		n := 0
		for s := range pub.confirmed {
			if !got[s] {
				n++
			}
		}
		return n
	}
	deadline := time.After(120 * time.Second)
	idle := time.NewTimer(5 * time.Second)
consume:
	for {
		select {
		case m := <-msgs:
			seq, err := strconv.Atoi(string(m.Body))
			if err != nil {
				t.Fatalf("body %q", m.Body)
			}
			got[seq] = true
			if err := m.Ack(false); err != nil {
				t.Fatal(err)
			}
			idle.Reset(5 * time.Second)
		case <-idle.C:
			if missing() == 0 {
				break consume
			}
			idle.Reset(5 * time.Second)
		case <-deadline:
			break consume
		}
	}
	if n := missing(); n > 0 {
		t.Fatalf("%d of %d confirmed messages lost in the rolling upgrade (consumed %d)", n, confirmed, len(got))
	}
	t.Logf("rolling upgrade: %d confirmed, %d nacked, all consumed (%d distinct), %d publisher connections",
		confirmed, pub.nacked, len(got), pub.conns.Load())
}

// TestOpsFeatureFlagsAPI: standalone, every flag is enabled; the flags
// are listed in RabbitMQ's shape and by tridentctl; enabling is for
// administrators only (a monitoring user is refused, over the API and
// through tridentctl); an unknown flag is 404.
func TestOpsFeatureFlagsAPI(t *testing.T) {
	_, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(201, "PUT", "/api/users/watcher", map[string]any{"password": "pw", "tags": "monitoring"})

	var fs []map[string]any
	if err := jsonUnmarshal(api.expect(200, "GET", "/api/feature-flags", nil), &fs); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fs {
		hasFields(t, "feature flag", f, "name", "desc", "stability", "provided_by", "state")
		if f["name"] == "feature_flags" {
			found = true
			if f["state"] != "enabled" || f["stability"] != "stable" {
				t.Errorf("feature_flags standalone: %v", f)
			}
		}
	}
	if !found {
		t.Fatalf("no feature_flags in %v", fs)
	}
	api.expect(204, "PUT", "/api/feature-flags/feature_flags/enable", map[string]any{})
	api.expect(404, "PUT", "/api/feature-flags/no_such_flag/enable", map[string]any{})

	w := api.as("watcher", "pw")
	w.expect(401, "GET", "/api/feature-flags", nil)
	w.expect(401, "PUT", "/api/feature-flags/feature_flags/enable", map[string]any{})

	ctl := func(user, pass string, want int, args ...string) string {
		t.Helper()
		return runCtl(t, base, user, pass, want, args...)
	}
	if out := ctl("guest", "guest", 0, "feature-flags", "list"); !strings.Contains(out, "feature_flags") || !strings.Contains(out, "enabled") {
		t.Errorf("feature-flags list:\n%s", out)
	}
	var listed []map[string]any
	if err := json.Unmarshal([]byte(ctl("guest", "guest", 0, "--format", "json", "feature-flags", "list")), &listed); err != nil || len(listed) != len(fs) {
		t.Errorf("feature-flags list --format json: %v %v", err, listed)
	}
	if out := ctl("guest", "guest", 0, "feature-flags", "enable", "feature_flags"); !strings.Contains(out, "enabled") {
		t.Errorf("feature-flags enable:\n%s", out)
	}
	if out := ctl("guest", "guest", 1, "feature-flags", "enable", "no_such_flag"); !strings.Contains(out, "no_such_flag") {
		t.Errorf("enable of an unknown flag:\n%s", out)
	}
	ctl("watcher", "pw", 1, "feature-flags", "list")
	ctl("watcher", "pw", 1, "feature-flags", "enable", "feature_flags")
	ctl("guest", "guest", 2, "feature-flags", "enable")
}

// TestOpsFeatureFlagsNewCluster: a new cluster of this build starts with
// feature_flags enabled on every node, and a node of the previous release
// that tries to join it is not added (the leader logs why): it could not
// read the entries the enabled flag lets the cluster write.
func TestOpsFeatureFlagsNewCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	oldBin := buildRelease(t, previousRelease)
	nodes := startCluster(t, 3)
	for _, o := range nodes {
		eventually(t, 60*time.Second, "feature_flags enabled on "+o.name, func() bool {
			f, err := flagOn(o, "feature_flags")
			return err == nil && f.State == "enabled"
		})
	}

	hp, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	name := "trident-old@localhost"
	var seeds []string
	for _, o := range nodes {
		seeds = append(seeds, o.gossip)
	}
	old, err := testbin.Launch(context.Background(), testbin.Options{Binary: oldBin, DataDir: filepath.Join(t.TempDir(), "data"),
		ExtraArgs: []string{"--http-listen", "127.0.0.1:" + strconv.Itoa(hp), "--cluster-node-name", name,
			"--cluster-gossip-listen", "127.0.0.1:" + strconv.Itoa(freeTCPUDPPort(t)), "--cluster-raft-listen", "127.0.0.1:" + strconv.Itoa(rp),
			"--cluster-cookie", "test-cookie", "--join", strings.Join(seeds, ",")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Cleanup)
	const refusal = "missing_feature_flags"
	eventually(t, 60*time.Second, "the leader to refuse "+name, func() bool {
		for _, o := range nodes {
			b, err := os.ReadFile(o.p.LogPath)
			if err != nil {
				continue
			}
			for l := range strings.Lines(string(b)) {
				if strings.Contains(l, refusal) && strings.Contains(l, name) {
					return true
				}
			}
		}
		return false
	})
	for _, o := range nodes {
		var ms []struct {
			Name string `json:"name"`
		}
		if _, err := o.tryAPI("GET", "/api/nodes", nil, &ms); err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Name == name {
				t.Fatalf("%s lists %s, a node of %s, as a member with feature_flags enabled", o.name, name, previousRelease)
			}
		}
	}
	if err := old.Stop(); err != nil {
		t.Logf("stop %s: %v", name, err)
	}
}
