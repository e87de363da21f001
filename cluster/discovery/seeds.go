package discovery

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"
)

// seedLoop joins the seeds of Config.DNS and Config.Join: it resolves the
// name at once, then every DNSConfig.Interval while the node sees fewer
// alive members than the cluster should have, and every SettledInterval
// afterwards (a node that came back at a new address is found then). Each
// round joins the seeds that are neither this node nor an alive member.
type seedLoop struct {
	m      *Membership
	res    *DNSResolver
	cfg    DNSConfig
	static []string
	bind   string // Config.BindAddr
	port   int    // Config.BindPort

	mu    sync.Mutex
	state seedState
}

// seedState is what the last round did (for tests and logs).
type seedState struct {
	rounds   int
	resolved []string // the name's seeds, nil after a failed lookup
	err      error    // the lookup's error
	tried    []string // the seeds joined (not this node, not members)
	reached  int      // how many of them answered
}

func (m *Membership) startSeedLoop(cfg Config) {
	l := &seedLoop{m: m, res: NewDNSResolver(cfg.DNS), cfg: cfg.DNS, static: cfg.Join,
		bind: cfg.BindAddr, port: cfg.BindPort}
	if l.cfg.Interval <= 0 {
		l.cfg.Interval = DefaultDNSInterval
	}
	if l.cfg.SettledInterval <= 0 {
		l.cfg.SettledInterval = DefaultDNSSettledInterval
	}
	m.seeds = l
	m.retryers.Add(1)
	go l.run()
}

func (l *seedLoop) run() {
	defer l.m.retryers.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	l.m.log.Info("cluster discovery through DNS", "name", l.cfg.Name, "srv", l.cfg.SRV,
		"server", l.cfg.Server, "static_seeds", l.static)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-l.m.stop:
			return
		case <-t.C:
		}
		every := l.cfg.SettledInterval
		if l.round(ctx) {
			every = l.cfg.Interval
		}
		t.Reset(every)
	}
}

// round resolves, joins, and reports whether the cluster is still
// forming (fewer alive members than expected).
func (l *seedLoop) round(ctx context.Context) bool {
	self, alive, n := l.m.seedView(l.bind, l.port)
	lctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	resolved, err := l.res.Seeds(lctx, ownPort(self, l.port))
	cancel()
	if ctx.Err() != nil {
		return false
	}
	tried := seedCandidates(append(slices.Clone(l.static), resolved...), self, alive)
	reached := 0
	if len(tried) > 0 {
		reached, _ = l.m.ml.Join(tried)
	}

	l.mu.Lock()
	prev := l.state
	l.state = seedState{rounds: prev.rounds + 1, resolved: resolved, err: err, tried: tried, reached: reached}
	l.mu.Unlock()
	// Logged when something changes, not every round.
	name := l.cfg.Name + l.cfg.SRV
	switch {
	case err != nil && (prev.err == nil || prev.err.Error() != err.Error()):
		l.m.log.Warn("cluster discovery: DNS lookup failed; retrying", "name", name, "err", err,
			"every", l.cfg.Interval)
	case err == nil && (prev.err != nil || !slices.Equal(prev.resolved, resolved)):
		l.m.log.Info("cluster discovery: DNS seeds", "name", name, "seeds", resolved)
	}
	if reached > 0 {
		l.m.log.Info("joined cluster through discovered seeds", "seeds", tried, "seeds_reached", reached)
	} else if len(tried) > 0 {
		l.m.log.Debug("discovered seeds did not answer", "seeds", tried)
	}
	if reached > 0 {
		_, _, n = l.m.seedView(l.bind, l.port)
	}
	return n < max(l.cfg.Expect, 2)
}

func (l *seedLoop) snapshot() seedState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// seedView returns this node's own gossip addresses, the addresses of
// alive members, and how many members are alive (itself included).
func (m *Membership) seedView(bind string, bindPort int) (self, alive map[string]bool, n int) {
	self, alive = map[string]bool{}, map[string]bool{}
	m.mu.Lock()
	for _, mb := range m.members {
		if mb.Status != StatusAlive {
			continue
		}
		n++
		if mb.Name == m.name {
			self[mb.Addr] = true
		} else {
			alive[mb.Addr] = true
		}
	}
	local := m.members[m.name].Addr
	m.mu.Unlock()
	// The bound address at the advertised and the bound port is this
	// node too; bound to every address, so is each local IP.
	ports := []int{bindPort}
	if _, p, err := net.SplitHostPort(local); err == nil {
		if n, _ := strconv.Atoi(p); n != 0 && n != bindPort {
			ports = append(ports, n)
		}
	}
	var ips []string
	if ip := net.ParseIP(bind); bind == "" || (ip != nil && ip.IsUnspecified()) {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok {
					ips = append(ips, ipn.IP.String())
				}
			}
		}
	} else if ip != nil {
		ips = append(ips, ip.String())
	}
	for _, p := range ports {
		if p == 0 {
			continue
		}
		for _, ip := range ips {
			self[net.JoinHostPort(ip, strconv.Itoa(p))] = true
		}
	}
	return self, alive, n
}

// ownPort is the advertised gossip port found in self (the local
// member's address), else bindPort.
func ownPort(self map[string]bool, bindPort int) int {
	if bindPort != 0 {
		return bindPort
	}
	for a := range self {
		if _, p, err := net.SplitHostPort(a); err == nil {
			if n, _ := strconv.Atoi(p); n != 0 {
				return n
			}
		}
	}
	return 0
}

// seedCandidates returns the seeds worth joining, sorted and distinct:
// not this node's own address, not an alive member's.
func seedCandidates(seeds []string, self, alive map[string]bool) []string {
	var out []string
	for _, s := range seeds {
		if self[s] || alive[s] {
			continue
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
