package discovery

import (
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// Timing presets of failure detection (Preset).
const (
	PresetLAN   = "lan"   // memberlist.DefaultLANConfig: a dead node is declared ~5-6 s after it stops answering
	PresetWAN   = "wan"   // memberlist.DefaultWANConfig
	PresetLocal = "local" // memberlist.DefaultLocalConfig (one host or a fast LAN)
	PresetFast  = "fast"  // for tests on one host: ~1-1.5 s
)

// Preset returns the memberlist configuration of a failure detection
// preset ("" is lan), with each of probeInterval, probeTimeout and
// suspicionMult replacing the preset's when not zero.
//
// How long a failure takes to be noticed: a member that stops answering
// is probed (ProbeInterval, ProbeTimeout, then indirect probes), declared
// suspect, and dead once its suspicion times out, SuspicionMult ×
// ProbeInterval × max(1, log10(members)) at first, shortened as other
// members confirm it.
func Preset(name string, probeInterval, probeTimeout time.Duration, suspicionMult int) (*memberlist.Config, error) {
	var mc *memberlist.Config
	switch name {
	case "", PresetLAN:
		mc = memberlist.DefaultLANConfig()
	case PresetWAN:
		mc = memberlist.DefaultWANConfig()
	case PresetLocal:
		mc = memberlist.DefaultLocalConfig()
	case PresetFast:
		mc = memberlist.DefaultLocalConfig()
		// Dead about 1-1.5 s after the last answer; a probe may take
		// 200 ms (a loaded test machine), and memberlist's awareness
		// stretches the timeouts of a node that misses its own.
		mc.ProbeInterval = 300 * time.Millisecond
		mc.ProbeTimeout = 200 * time.Millisecond
		mc.SuspicionMult = 3
		mc.SuspicionMaxTimeoutMult = 2
		mc.GossipInterval = 50 * time.Millisecond
		mc.TCPTimeout = 2 * time.Second
		mc.PushPullInterval = 5 * time.Second
	default:
		return nil, fmt.Errorf("discovery: unknown failure detection preset %q", name)
	}
	if probeInterval > 0 {
		mc.ProbeInterval = probeInterval
	}
	if probeTimeout > 0 {
		mc.ProbeTimeout = probeTimeout
	}
	if suspicionMult > 0 {
		mc.SuspicionMult = suspicionMult
	}
	return mc, nil
}

// keyring builds memberlist's keyring from keys (the primary, used to
// send, first; the others are also accepted); nil for none.
func keyring(keys [][]byte) (*memberlist.Keyring, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	kr, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return nil, fmt.Errorf("discovery: gossip keyring: %w", err)
	}
	return kr, nil
}
