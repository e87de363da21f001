package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DNSConfig finds seeds in DNS, as a Kubernetes headless service
// publishes its pods: the A/AAAA records of Name (each address with Port)
// or the SRV records of SRV (each target's addresses with the record's
// port). Set one of Name and SRV.
type DNSConfig struct {
	// Name's A and AAAA records are the nodes' addresses.
	Name string
	// SRV's records are the nodes' gossip hosts and ports.
	SRV string
	// Port is joined at each address of Name; 0 means the node's own
	// advertised gossip port.
	Port int
	// Server is the DNS server asked, host:port; empty means the system's
	// resolver.
	Server string
	// Interval is how often the name is resolved while the node sees
	// fewer alive members than Expect (at least 2); SettledInterval how
	// often afterwards. 0 means DefaultDNSInterval and
	// DefaultDNSSettledInterval.
	Interval        time.Duration
	SettledInterval time.Duration
	// Expect is the cluster's expected size (bootstrap_expect).
	Expect int
}

// Defaults of DNSConfig's intervals, and the bound of one resolution.
const (
	DefaultDNSInterval        = 2 * time.Second
	DefaultDNSSettledInterval = 30 * time.Second
	dnsTimeout                = 5 * time.Second
	// maxDNSSeeds bounds the seeds taken from one resolution (and the
	// SRV targets looked up): a cluster is never that large, and a
	// misconfigured name must not make a node dial thousands of peers.
	maxDNSSeeds = 128
)

// Enabled reports whether seeds come from DNS.
func (d DNSConfig) Enabled() bool { return d.Name != "" || d.SRV != "" }

// ErrNoDNSSeeds is returned by DNSResolver.Seeds when the name resolved
// to no usable address.
var ErrNoDNSSeeds = errors.New("discovery: DNS name has no usable address")

func (d DNSConfig) validate() []error {
	var errs []error
	if d.Name != "" && d.SRV != "" {
		errs = append(errs, fmt.Errorf("%w: DNS discovery: set a name or an SRV name, not both", ErrBadAddr))
	}
	if d.Port < 0 || d.Port > 65535 {
		errs = append(errs, fmt.Errorf("%w: DNS discovery port %d", ErrBadAddr, d.Port))
	}
	if d.Server != "" {
		if _, _, err := net.SplitHostPort(d.Server); err != nil {
			errs = append(errs, fmt.Errorf("%w: DNS server %q: %v", ErrBadAddr, d.Server, err))
		}
	}
	return errs
}

// DNSResolver resolves a DNSConfig's name into seeds. It caches nothing:
// every call asks the server.
type DNSResolver struct {
	c DNSConfig
	r *net.Resolver
}

// NewDNSResolver returns a resolver for c's name that asks c.Server (Go's
// own resolver, over UDP, and TCP for truncated answers) or, without one,
// the system's resolver.
func NewDNSResolver(c DNSConfig) *DNSResolver {
	r := net.DefaultResolver
	if c.Server != "" {
		server := c.Server
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	return &DNSResolver{c: c, r: r}
}

// Seeds resolves the name into sorted, distinct ip:port gossip
// addresses; port is used for Name's addresses when DNSConfig.Port is 0.
// A name that does not exist, or has no address, is an error (the caller
// tries again later).
func (d *DNSResolver) Seeds(ctx context.Context, port int) ([]string, error) {
	if d.c.Port != 0 {
		port = d.c.Port
	}
	var out []string
	var err error
	switch {
	case d.c.SRV != "":
		out, err = d.srv(ctx)
	case d.c.Name != "":
		out, err = d.addrs(ctx, d.c.Name, port, nil)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 && err == nil {
		err = ErrNoDNSSeeds
	}
	return out, d.named(err)
}

// named makes a lookup error name the server asked: Go's resolver names
// the system's first name server even when Dial sent the query to
// DNSConfig.Server.
func (d *DNSResolver) named(err error) error {
	var de *net.DNSError
	if d.c.Server != "" && errors.As(err, &de) {
		de.Server = d.c.Server
	}
	return err
}

// addrs appends host's addresses with port to out (up to maxDNSSeeds).
func (d *DNSResolver) addrs(ctx context.Context, host string, port int, out []string) ([]string, error) {
	host = strings.TrimSuffix(host, ".")
	if ip := net.ParseIP(host); ip != nil {
		return append(out, net.JoinHostPort(ip.String(), strconv.Itoa(port))), nil
	}
	ips, err := d.r.LookupIPAddr(ctx, host)
	for _, ip := range ips {
		if len(out) >= maxDNSSeeds {
			break
		}
		out = append(out, net.JoinHostPort(ip.IP.String(), strconv.Itoa(port)))
	}
	return out, err
}

// srv resolves the SRV name and each target's addresses. A target that
// does not resolve is left out (the others are seeds all the same).
func (d *DNSResolver) srv(ctx context.Context) ([]string, error) {
	// Go returns the valid records along with an error when some target
	// is not a valid name: keep those.
	_, recs, err := d.r.LookupSRV(ctx, "", "", d.c.SRV)
	if len(recs) == 0 {
		return nil, err
	}
	var out []string
	var errs []error
	for i, rec := range recs {
		if i >= maxDNSSeeds || len(out) >= maxDNSSeeds {
			break
		}
		if rec.Port == 0 {
			continue
		}
		var aerr error
		if out, aerr = d.addrs(ctx, rec.Target, int(rec.Port), out); aerr != nil {
			errs = append(errs, aerr)
		}
	}
	if len(out) == 0 {
		return nil, errors.Join(append(errs, err)...)
	}
	return out, nil
}
