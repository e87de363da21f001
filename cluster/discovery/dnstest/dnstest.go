// Package dnstest runs a real, authoritative DNS server on 127.0.0.1 for
// tests of DNS discovery (as net/http/httptest does for HTTP): A, AAAA
// and SRV records that a test changes while it runs, NXDOMAIN for any
// other name. It serves UDP and TCP on one port.
package dnstest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// SRV is one SRV record's target and port.
type SRV struct {
	Target string
	Port   uint16
}

// Server is a running DNS server.
type Server struct {
	// Addr is the server's host:port (UDP and TCP).
	Addr string

	udp, tcp *dns.Server

	mu      sync.Mutex
	addrs   map[string][]net.IP // fqdn, lower case → addresses
	srvs    map[string][]SRV
	queries map[string]int // fqdn → questions asked
}

// New starts a server on 127.0.0.1 and stops it when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{addrs: map[string][]net.IP{}, srvs: map[string][]SRV{}, queries: map[string]int{}}
	var pc net.PacketConn
	var ln net.Listener
	for attempt := 0; ; attempt++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if attempt == 20 {
			t.Fatalf("dnstest: no port free for UDP and TCP: %v", err)
		}
	}
	s.Addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(s.serve)
	s.udp = &dns.Server{PacketConn: pc, Handler: h}
	s.tcp = &dns.Server{Listener: ln, Handler: h}
	var started sync.WaitGroup
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		started.Add(1)
		srv.NotifyStartedFunc = started.Done
		go func() { _ = srv.ActivateAndServe() }()
	}
	started.Wait()
	t.Cleanup(func() {
		_ = s.udp.Shutdown()
		_ = s.tcp.Shutdown()
	})
	return s
}

func fqdn(name string) string { return strings.ToLower(dns.Fqdn(name)) }

// SetAddrs makes name's A and AAAA records ips (none: the name exists
// without addresses).
func (s *Server) SetAddrs(name string, ips ...string) {
	var out []net.IP
	for _, ip := range ips {
		p := net.ParseIP(ip)
		if p == nil {
			panic(fmt.Sprintf("dnstest: %q is not an IP", ip))
		}
		out = append(out, p)
	}
	s.mu.Lock()
	s.addrs[fqdn(name)] = out
	s.mu.Unlock()
}

// SetSRV makes name's SRV records recs.
func (s *Server) SetSRV(name string, recs ...SRV) {
	s.mu.Lock()
	s.srvs[fqdn(name)] = append([]SRV(nil), recs...)
	s.mu.Unlock()
}

// Remove deletes every record of name: it is NXDOMAIN again.
func (s *Server) Remove(name string) {
	s.mu.Lock()
	delete(s.addrs, fqdn(name))
	delete(s.srvs, fqdn(name))
	s.mu.Unlock()
}

// Queries is how many questions about name the server answered.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[fqdn(name)]
}

func (s *Server) serve(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative, m.RecursionAvailable = true, true
	s.mu.Lock()
	for _, q := range r.Question {
		name := strings.ToLower(q.Name)
		s.queries[name]++
		ips, okA := s.addrs[name]
		recs, okS := s.srvs[name]
		if !okA && !okS {
			m.Rcode = dns.RcodeNameError
			continue
		}
		hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 0}
		switch q.Qtype {
		case dns.TypeA:
			for _, ip := range ips {
				if v4 := ip.To4(); v4 != nil {
					m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: v4})
				}
			}
		case dns.TypeAAAA:
			for _, ip := range ips {
				if ip.To4() == nil {
					m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip})
				}
			}
		case dns.TypeSRV:
			for _, rec := range recs {
				m.Answer = append(m.Answer, &dns.SRV{Hdr: hdr, Priority: 10, Weight: 10,
					Port: rec.Port, Target: dns.Fqdn(rec.Target)})
			}
		}
	}
	s.mu.Unlock()
	_ = w.WriteMsg(m)
}
