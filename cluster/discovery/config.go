package discovery

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultPort is the default gossip port (TCP and UDP). It is RabbitMQ's
// inter-node port (AMQP port + 20000), which firewalls in front of a
// RabbitMQ cluster already open between nodes.
const DefaultPort = 25672

// Config is one node's membership configuration.
type Config struct {
	// NodeName is the node's unique name in the cluster; a node that
	// restarts with the same name is the same member.
	NodeName string
	// BindAddr and BindPort are where the gossip listeners bind. Port 0
	// picks a free port (see Membership.LocalMember for the one chosen).
	BindAddr string
	BindPort int
	// AdvertiseAddr is the address peers use to reach this node; empty
	// means the bind address (or, for 0.0.0.0, a private address of the
	// host). AdvertisePort 0 means the bound port.
	AdvertiseAddr string
	AdvertisePort int
	// Join lists host:port seeds of an existing cluster; empty starts a
	// cluster of one (others may join it).
	Join []string
	// RetryJoinInterval is how often a join that reached no seed is
	// retried in the background.
	RetryJoinInterval time.Duration
	// Meta is gossiped with the node: e.g. "raft" and "amqp" addresses.
	Meta map[string]string
	// OnEvent, if set, is called for each membership event (see Event).
	OnEvent func(Event)
	// Memberlist is the base memberlist configuration: its timers decide
	// how fast failures are detected. Nil means memberlist.DefaultLANConfig.
	// Name, bind/advertise, delegates and logger are set from the fields
	// above.
	Memberlist *memberlist.Config
	// GossipKeys, if any, encrypt gossip (AES-GCM, memberlist's keyring):
	// the first sends, every one is accepted; a member without one of
	// them can neither join nor be heard. Each is 16, 24 or 32 bytes.
	GossipKeys [][]byte
	// DNS, if enabled, finds more seeds in DNS while the node runs
	// (dns.go, seeds.go); Join's seeds are joined along with them.
	DNS DNSConfig
}

// Default returns a configuration with the defaults filled in; NodeName
// must still be set.
func Default() Config {
	return Config{
		BindAddr:          "0.0.0.0",
		BindPort:          DefaultPort,
		RetryJoinInterval: 5 * time.Second,
	}
}

// Errors returned by Validate (joined).
var (
	ErrNoNodeName  = errors.New("discovery: node name is empty")
	ErrBadAddr     = errors.New("discovery: bad address")
	ErrMetaTooLong = fmt.Errorf("discovery: metadata longer than %d bytes encoded", memberlist.MetaMaxSize)
)

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, ErrNoNodeName)
	}
	if c.BindAddr != "" && net.ParseIP(c.BindAddr) == nil {
		errs = append(errs, fmt.Errorf("%w: bind address %q is not an IP", ErrBadAddr, c.BindAddr))
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		errs = append(errs, fmt.Errorf("%w: advertise address %q is not an IP", ErrBadAddr, c.AdvertiseAddr))
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"bind port", c.BindPort}, {"advertise port", c.AdvertisePort}} {
		if p.v < 0 || p.v > 65535 {
			errs = append(errs, fmt.Errorf("%w: %s %d", ErrBadAddr, p.name, p.v))
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			errs = append(errs, fmt.Errorf("%w: join %q: %v", ErrBadAddr, j, err))
		}
	}
	errs = append(errs, c.DNS.validate()...)
	if len(encodeMeta(c.Meta)) > memberlist.MetaMaxSize {
		errs = append(errs, ErrMetaTooLong)
	}
	return errors.Join(errs...)
}

// memberlistConfig builds memberlist's configuration from c.
func (c Config) memberlistConfig() *memberlist.Config {
	var mc memberlist.Config
	if c.Memberlist != nil {
		mc = *c.Memberlist
	} else {
		mc = *memberlist.DefaultLANConfig()
	}
	mc.Name = c.NodeName
	mc.BindAddr = c.BindAddr
	if mc.BindAddr == "" {
		mc.BindAddr = "0.0.0.0"
	}
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort // 0 stays 0: memberlist uses the bound port
	}
	return &mc
}
