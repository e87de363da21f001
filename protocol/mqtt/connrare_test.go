package mqtt

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// recordLog keeps the records logged through it.
type recordLog struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordWith{h: h, attrs: as}
}
func (h *recordLog) WithGroup(string) slog.Handler                 { return h }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error { return h.add(nil, r) }

func (h *recordLog) add(pre []slog.Attr, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	for _, a := range pre {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	h.recs = append(h.recs, m)
	h.mu.Unlock()
	return nil
}

func (h *recordLog) find(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, m := range h.recs {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

type recordWith struct {
	h     *recordLog
	attrs []slog.Attr
}

func (w *recordWith) Enabled(context.Context, slog.Level) bool { return true }
func (w *recordWith) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordWith{h: w.h, attrs: append(append([]slog.Attr(nil), w.attrs...), as...)}
}
func (w *recordWith) WithGroup(string) slog.Handler { return w }
func (w *recordWith) Handle(_ context.Context, r slog.Record) error {
	return w.h.add(w.attrs, r)
}

// TestRefusedLoginNamed: a CONNECT refused after authentication (its
// vhost does not exist), before the connection has a user, is logged
// under the user name it gave (connRare.loginName); an idle device that
// was not refused holds no rare state.
func TestRefusedLoginNamed(t *testing.T) {
	logs := &recordLog{}
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) { s.log = slog.New(logs) })
	host, port, err := splitHostPortNum(addr)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := fleetDevice{fd: fd}
	defer d.close()
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Addr: host, Port: port}); err != nil {
		t.Fatal(err)
	}
	var body []byte
	body = benchString(body, "MQTT")
	body = append(body, 4, 0xC2, 0, 0)
	body = benchString(body, "refused-1")
	body = benchString(body, "no-such-vhost:guest")
	body = benchString(body, "guest")
	d.write(t, benchPacket(nil, 0x10, body))
	if first, b := d.read(t); first>>4 != 2 || len(b) < 2 || b[1] != 5 {
		t.Fatalf("CONNACK to a vhost that does not exist: %x %x", first, b)
	}
	var rec map[string]string
	for deadline := time.Now().Add(10 * time.Second); rec == nil; time.Sleep(5 * time.Millisecond) {
		if r := logs.find("connection refused"); len(r) > 0 {
			rec = r[0]
		} else if time.Now().After(deadline) {
			t.Fatal("the refusal is not logged")
		}
	}
	if rec["user"] != "guest" {
		t.Fatalf("refusal logged as %v, want user guest", rec)
	}

	dev := dialFleetDevice(t, addr, "rare-none", []string{"rare/t"}, []byte{1})
	defer dev.close()
	if c := serverConn(t, s, "rare-none"); c.rare != nil {
		t.Fatalf("a plain device holds rare state %+v", *c.rare)
	}
}

// TestUnsubscribeUnbinds: UNSUBSCRIBE takes away the binding of the
// filter's key (made from the filter: a subscription keeps no key) and
// leaves the session's other binding.
func TestUnsubscribeUnbinds(t *testing.T) {
	s, addr := testServer(t)
	d := dialFleetDevice(t, addr, "unbind", []string{"unbind/a", "unbind/+"}, []byte{1, 1})
	defer d.close()
	c := serverConn(t, s, "unbind")
	keys := func() map[string]bool {
		m := map[string]bool{}
		for _, b := range c.vh.Bindings() {
			if b.Destination == c.se.qname {
				m[b.RoutingKey] = true
			}
		}
		return m
	}
	if k := keys(); len(k) != 2 || !k["unbind.a"] || !k["unbind.*"] {
		t.Fatalf("bindings %v, want unbind.a and unbind.*", k)
	}
	body := binary.BigEndian.AppendUint16(nil, 2)
	body = benchString(body, "unbind/a")
	d.write(t, benchPacket(nil, 0xA2, body))
	if first, _ := d.read(t); first>>4 != 11 {
		t.Fatalf("UNSUBACK: %x", first)
	}
	if k := keys(); len(k) != 1 || !k["unbind.*"] {
		t.Fatalf("bindings after UNSUBSCRIBE %v, want unbind.* alone", k)
	}
}

// TestSessionExpiryRearmed: a persistent session resumed before it
// expires and left again expires its interval after the second
// departure, not the first (the session keeps its expiry timer, in
// sessionRare, to stop when it is resumed and to replace).
func TestSessionExpiryRearmed(t *testing.T) {
	s, addr := testServer(t)
	connect := func() net.Conn { return rawConnect5Expiry(t, addr, "rearm", 2) }
	disconnected := func() {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if info, ok := s.Session("/", "rearm"); ok && !info.Connected {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the session is not shown disconnected")
			}
		}
	}
	connect().Close()
	disconnected()
	first := time.Now() // the first expiry due 2 s from here
	time.Sleep(time.Second)
	connect().Close()
	disconnected()
	second := time.Now()
	time.Sleep(time.Until(first.Add(2500 * time.Millisecond)))
	if _, ok := s.Session("/", "rearm"); !ok {
		t.Fatalf("the session expired %v after its first departure, %v after its second", time.Since(first), time.Since(second))
	}
	for deadline := second.Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := s.Session("/", "rearm"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session did not expire 2 s after its second departure")
		}
	}
}
