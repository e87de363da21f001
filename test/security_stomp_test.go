package test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/trident-broker/trident/conf"
)

// secHeapPeak samples this process's live heap (the in-process broker's
// and the test's) every 5ms until stop is called, which returns the peak
// growth over the heap at the start, after a GC.
func secHeapPeak() (stop func() int64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() int64 { metrics.Read(s); return int64(s[0].Value.Uint64()) }
	base := heap()
	return samplePeak(5*time.Millisecond, func() int64 { return heap() - base })
}

// samplePeak calls read every period until stop is called, which returns
// the largest value read.
func samplePeak(period time.Duration, read func() int64) (stop func() int64) {
	var peak atomic.Int64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			if v := read(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	return func() int64 { close(done); <-finished; return peak.Load() }
}

// stRawOver is a hand-driven STOMP connection over tr.
func stRawOver(t testing.TB, b *broker, tr stTransport) *stRaw {
	t.Helper()
	nc := tr.dial(t, b)
	t.Cleanup(func() { nc.Close() })
	return &stRaw{t: t, nc: nc, r: stFrameReader(nc)}
}

// stAPIConnUsers lists the users of the open STOMP connections through
// the management API.
func stAPIConnUsers(t testing.TB, b *broker) []string {
	t.Helper()
	a := apiClient{t: t, base: "http://" + b.n.HTTPAddr().String(), user: "guest", pass: "guest"}
	code, data := a.do("GET", "/api/connections", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /api/connections: %d %s", code, data)
	}
	var conns []struct {
		User     string `json:"user"`
		Protocol string `json:"protocol"`
	}
	if err := json.Unmarshal(data, &conns); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range conns {
		if strings.Contains(c.Protocol, "STOMP") {
			out = append(out, c.User)
		}
	}
	return out
}

// nonLoopbackIP returns an IPv4 address of this host that is not loopback,
// or nil.
func nonLoopbackIP() net.IP {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	return nil
}

// TestSecurityF2STOMPNoLogin (issue 38, F2): a CONNECT without a login
// header used to log in as the top-level default_user (guest, or with
// --default-user admin an administrator, from any address). Now it is
// refused with an ERROR frame unless stomp.allow_anonymous maps it to
// stomp.default_user, whose loopback restriction holds.
func TestSecurityF2STOMPNoLogin(t *testing.T) {
	noLogin := "CONNECT\naccept-version:1.2\nhost:/\n\n\x00"

	t.Run("default", func(t *testing.T) {
		b := stBroker(t)
		for _, tr := range stTransports {
			for _, cmd := range []string{"CONNECT", "STOMP"} {
				r := stRawOver(t, b, tr)
				r.write(strings.Replace(noLogin, "CONNECT", cmd, 1))
				if f := r.expectError("Bad CONNECT"); !strings.Contains(string(f.Body), "Missing login") {
					t.Fatalf("%s over %s: body %q", cmd, tr.name, f.Body)
				}
			}
			// go-stomp without credentials.
			nc := tr.dial(t, b)
			if c, err := stomp.Connect(nc, stHostOpt()); err == nil {
				c.Disconnect()
				t.Fatalf("go-stomp without login over %s connected", tr.name)
			}
			nc.Close()
		}
		stConnect(t, b, stTransports[0]) // guest/guest from loopback still works
	})

	t.Run("bootstrap admin", func(t *testing.T) {
		// As --default-user admin --default-pass ...: an administrator
		// who may connect from anywhere. Naming a STOMP default user
		// does not turn anonymous logins on either.
		b := stBroker(t, func(c *conf.Config) {
			c.DefaultUser, c.DefaultPass, c.LoopbackUsers = "admin", "admin-secret", nil
			c.STOMP.DefaultUser, c.STOMP.DefaultPass = "admin", "admin-secret"
		})
		for _, tr := range stTransports {
			r := stRawOver(t, b, tr)
			r.write(noLogin)
			r.expectError("Bad CONNECT")
		}
		r := stDialRaw(t, b)
		r.write("CONNECT\naccept-version:1.2\nhost:/\nlogin:admin\npasscode:admin-secret\n\n\x00")
		if f := r.read(); f.Command != "CONNECTED" {
			t.Fatalf("admin with its password: %s %q", f.Command, f.Body)
		}
	})

	t.Run("allow_anonymous needs its own user", func(t *testing.T) {
		c := conf.Default()
		c.STOMP.AllowAnonymous = true
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "stomp.allow_anonymous") {
			t.Fatalf("Validate: %v, want stomp.allow_anonymous refused without stomp.default_user", err)
		}
		c.STOMP.DefaultUser, c.STOMP.DefaultPass = c.DefaultUser, c.DefaultPass
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "stomp.default_user") {
			t.Fatalf("Validate: %v, want the bootstrap user refused as stomp.default_user", err)
		}
	})

	t.Run("allow_anonymous", func(t *testing.T) {
		ip := nonLoopbackIP()
		b := stBroker(t, func(c *conf.Config) {
			c.STOMP.AllowAnonymous = true
			c.STOMP.DefaultUser, c.STOMP.DefaultPass = "anon", "anon-pw"
			c.LoopbackUsers = []string{"guest", "anon"}
			c.HTTP.Listen = "127.0.0.1:0"
			if ip != nil {
				c.STOMP.Listen = "0.0.0.0:0"
			}
		})
		if err := b.n.Users().PutUser("anon", "anon-pw", nil); err != nil {
			t.Fatal(err)
		}
		if err := b.n.Users().SetPermissions("anon", "/", "^anon-", `^(anon-.*|amq\.default)$`, "^anon-"); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(stAddr(b))
		nc, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
		if err != nil {
			t.Fatal(err)
		}
		c, err := stomp.Connect(nc, stHostOpt())
		if err != nil {
			t.Fatalf("anonymous from loopback: %v", err)
		}
		defer c.Disconnect()
		// It is stomp.default_user, with that user's permissions only.
		if err := c.Send("/queue/anon-q", "text/plain", []byte("hi"), stomp.SendOpt.Receipt); err != nil {
			t.Fatalf("anon publishes to its queue: %v", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for users := stAPIConnUsers(t, b); len(users) != 1 || users[0] != "anon"; users = stAPIConnUsers(t, b) {
			if time.Now().After(deadline) {
				t.Fatalf("STOMP connection users %v, want [anon]", users)
			}
			time.Sleep(20 * time.Millisecond)
		}
		r := stDialRaw(t, b)
		r.write(noLogin + "SEND\ndestination:/queue/private-q\n\nx\x00")
		if f := r.read(); f.Command != "CONNECTED" {
			t.Fatalf("anonymous: %s %q", f.Command, f.Body)
		}
		r.expectError("access_refused")

		// loopback_users applies to the user anonymous logins map to.
		if ip == nil {
			t.Log("no non-loopback IPv4 address: loopback restriction of the anonymous user not checked")
			return
		}
		nc, err = net.Dial("tcp", net.JoinHostPort(ip.String(), port))
		if err != nil {
			t.Fatal(err)
		}
		remote := &stRaw{t: t, nc: nc, r: stFrameReader(nc)}
		t.Cleanup(func() { nc.Close() })
		remote.write(noLogin)
		if f := remote.expectError("Bad CONNECT"); !strings.Contains(string(f.Body), "localhost") {
			t.Fatalf("anonymous from %s: body %q", ip, f.Body)
		}
	})
}

// stFlood opens a connection over tr, sends head and then streams up to
// limit filler bytes in 32 KiB writes, stopping once the broker answers.
// It returns the frame the broker answered with (nil if none came within
// a few seconds of the end of the stream).
func stFlood(t *testing.T, b *broker, tr stTransport, head string, limit int) (cmd, msg string) {
	nc := tr.dial(t, b)
	defer nc.Close()
	r := stFrameReader(nc)
	answered := make(chan [2]string, 1)
	go func() {
		_ = nc.SetReadDeadline(time.Now().Add(60 * time.Second))
		for {
			f, err := r.Read()
			if err != nil {
				answered <- [2]string{}
				return
			}
			if f != nil {
				answered <- [2]string{f.Command, f.Header.Get("message")}
				return
			}
		}
	}()
	if _, err := nc.Write([]byte(head)); err != nil {
		t.Errorf("%s: write head: %v", tr.name, err)
		return "", ""
	}
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for sent := 0; sent < limit; sent += len(chunk) {
		select {
		case a := <-answered:
			return a[0], a[1]
		default:
		}
		_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(chunk); err != nil {
			break // closed by the broker: its answer is read below
		}
	}
	select {
	case a := <-answered:
		return a[0], a[1]
	case <-time.After(5 * time.Second):
		return "", ""
	}
}

// TestSecurityF3STOMPPreAuthBound (issue 38, F3): connections that have
// not logged in send a CONNECT declaring content-length 120000000 (or no
// length at all) and stream its body; each used to make the broker
// buffer the declared size. Now a frame before login is bounded by
// stomp.max_frame_size_unauthenticated (8 KiB) while it is read: each gets
// an ERROR frame and is closed, and the broker's heap stays small, over
// TCP and WebSocket, several at once.
func TestSecurityF3STOMPPreAuthBound(t *testing.T) {
	b := stBroker(t)
	const stream = 16 << 20 // each connection streams up to this much
	heads := []string{
		"CONNECT\naccept-version:1.2\nhost:/\ncontent-length:120000000\n\n",
		"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\ncontent-length:120000000\n\n",
		"CONNECT\naccept-version:1.2\nhost:/\n\n", // a body without content-length, never ended
		"CONNECT\naccept-version:1.2\nx-padding:", // a header line that never ends
	}
	stop := secHeapPeak()
	var wg sync.WaitGroup
	type result struct{ name, cmd, msg string }
	results := make(chan result, 16)
	for _, tr := range stTransports {
		for i, head := range heads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd, msg := stFlood(t, b, tr, head, stream)
				results <- result{tr.name + "/" + strconv.Itoa(i), cmd, msg}
			}()
		}
	}
	wg.Wait()
	peak := stop()
	close(results)
	for r := range results {
		if r.cmd != "ERROR" || (r.msg != "Frame too large" && r.msg != "Header too long") {
			t.Errorf("%s: answered %q %q, want ERROR \"Frame too large\"", r.name, r.cmd, r.msg)
		}
	}
	t.Logf("heap peak growth with %d connections streaming up to %d MiB each: %.1f MiB",
		len(heads)*len(stTransports), stream>>20, float64(peak)/(1<<20))
	// Without the bound each connection buffers what it streamed (or the
	// declared 120 MB at once): hundreds of MiB.
	if peak > 32<<20 {
		t.Fatalf("heap grew by %.1f MiB before any login", float64(peak)/(1<<20))
	}
	// The listener still serves logins.
	stConnect(t, b, stTransports[0])
	stConnect(t, b, stTransports[1])
}

// TestSecurityF16STOMPBodyGrows (issue 38, F16, STOMP side): an
// authenticated SEND declaring a body just under the frame limit and
// trickling it used to make the broker allocate the declared size at the
// header. Now the buffer grows as the body arrives; the frame still
// completes, and a declared size over the limit is an ERROR frame.
func TestSecurityF16STOMPBodyGrows(t *testing.T) {
	const maxBody = 64 << 20
	b := stBroker(t, func(c *conf.Config) { c.AMQP.MaxMessageSize = maxBody })
	r := stDialRaw(t, b)
	r.connect()
	declared := maxBody - 1024
	stop := secHeapPeak()
	r.write("SEND\ndestination:/queue/f16\ncontent-length:" + strconv.Itoa(declared) + "\nreceipt:r1\n\n")
	chunk := bytes.Repeat([]byte("b"), 64<<10)
	sent := 0
	for range 16 { // 1 MiB, slowly
		r.write(string(chunk))
		sent += len(chunk)
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	peak := stop()
	t.Logf("heap peak growth after %d KiB of a %d MiB body: %.1f MiB", sent>>10, declared>>20, float64(peak)/(1<<20))
	if peak > 16<<20 {
		t.Fatalf("heap grew by %.1f MiB for %d KiB received of a declared %d MiB", float64(peak)/(1<<20), sent>>10, declared>>20)
	}
	// The rest of the body: the frame completes and is published.
	rest := declared - sent
	big := bytes.Repeat([]byte("b"), 1<<20)
	for rest > 0 {
		n := min(rest, len(big))
		if _, err := r.nc.Write(big[:n]); err != nil {
			t.Fatal(err)
		}
		rest -= n
	}
	r.write("\x00")
	_ = r.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if f, err := r.r.Read(); err != nil || f.Command != "RECEIPT" || f.Header.Get("receipt-id") != "r1" {
		t.Fatalf("after the whole body: %v %v", f, err)
	}
	stWaitReady(t, b, "f16", 1, 0)

	// Over the limit: refused at the header.
	r = stDialRaw(t, b)
	r.connect()
	r.write("SEND\ndestination:/queue/f16\ncontent-length:" + strconv.Itoa(maxBody+1) + "\n\n")
	r.expectError("Frame too large")
}
