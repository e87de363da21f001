package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/exchange"
)

// Feature flags in the metadata group. A flag is enabled by a typed
// command entry (KindEnableFlag) that every member applies: the flag's
// record goes into the local store (so it survives restarts and is in
// snapshots) and into the Set (Config.Flags). The command is proposed
// only once every server of the group's configuration is running and
// gossips (featureflags.GossipKey) that it supports the flag; the leader
// adds no member that lacks an enabled flag (Reconcile). A node of
// v0.1.0 gossips no flags: while one is a member no flag is enabled, and
// so no version 2 entry, which it cannot read, is written.

// Flags returns the enabled feature flags of the cluster, as this node
// applied them.
func (g *Group) Flags() *featureflags.Set { return g.c.Flags }

// Halted returns why this node stopped applying the group's entries (an
// entry of a newer release's format), nil while it applies them.
func (g *Group) Halted() error { return g.fsm.Halted() }

// EnableFeatureFlag enables the flag named name in the whole cluster,
// after the flags it depends on (feature_flags first), and returns once
// the command is committed and applied here. It fails with
// featureflags.ErrUnknown for a flag this node does not know, and with a
// *featureflags.UnsupportedError, naming the members, when a server of
// the group is not running or does not support a flag to enable.
func (g *Group) EnableFeatureFlag(ctx context.Context, name string) error {
	if _, ok := featureflags.Lookup(name); !ok {
		return fmt.Errorf("%w: %q", featureflags.ErrUnknown, name)
	}
	for _, n := range featureflags.EnableOrder(g.c.Flags, name) {
		if miss := g.unsupported()[n]; len(miss) > 0 {
			return &featureflags.UnsupportedError{Flag: n, Members: miss}
		}
		c := Command{Kind: KindEnableFlag, Flag: n}
		if err := g.gate(c); err != nil {
			return err
		}
		if err := g.propose(ctx, EncodeCommand(c)); err != nil {
			return fmt.Errorf("meta: enable feature flag %s: %w", n, err)
		}
	}
	return nil
}

// gate is the writer's check before it writes a typed command: the flag
// of its kind is enabled. The one exception is the command that enables
// feature_flags itself, written once every member supports it (which is
// what makes every member read version 2 entries).
func (g *Group) gate(c Command) error {
	if c.Kind == KindEnableFlag && c.Flag == featureflags.FeatureFlags {
		return nil
	}
	return g.c.Flags.Require(commandFlag[c.Kind])
}

// FeatureFlags returns every flag of this node's registry with its state
// in the cluster.
func (g *Group) FeatureFlags() []featureflags.Status {
	return featureflags.Report(g.c.Flags, g.unsupported())
}

// unsupported maps each flag of the registry to the servers of the group
// that do not support it: "node (older release)" for a running member
// whose gossip lacks it, "node (not running)" for one discovery does not
// show alive (its support cannot be known).
func (g *Group) unsupported() map[string][]string {
	byName := map[string]discovery.Member{}
	if g.c.Members != nil {
		for _, m := range g.c.Members() {
			byName[m.Name] = m
		}
	}
	self := string(g.c.Host.Self().ID)
	out := map[string][]string{}
	for id := range g.servers() {
		if id == self {
			continue // this node supports its registry
		}
		m, ok := byName[id]
		if !ok || m.Status != discovery.StatusAlive {
			for _, f := range featureflags.All() {
				if f.Stability != featureflags.Required {
					out[f.Name] = append(out[f.Name], id+" (not running)")
				}
			}
			continue
		}
		sup := featureflags.DecodeSupport(m.Meta)
		for _, f := range featureflags.All() {
			if !sup[f.Name] {
				out[f.Name] = append(out[f.Name], id+" (its release does not support it)")
			}
		}
	}
	return out
}

// missingFlags returns the enabled flags that member m does not support:
// the leader does not add such a member (Reconcile).
func (g *Group) missingFlags(m discovery.Member) []string {
	return g.c.Flags.Missing(featureflags.DecodeSupport(m.Meta))
}

// enableOnBootstrap enables every stable flag that all the members
// support, once this node has bootstrapped a new group: a new cluster
// starts with its release's flags on. A flag some member does not support
// stays disabled. It gives up after a while (no leader, no quorum).
func (g *Group) enableOnBootstrap() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-g.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, f := range featureflags.All() {
		if f.Stability != featureflags.Stable {
			continue
		}
		for ctx.Err() == nil && !g.c.Flags.Enabled(f.Name) {
			err := g.EnableFeatureFlag(ctx, f.Name)
			if err == nil || errors.Is(err, featureflags.ErrUnsupported) {
				if err != nil {
					g.log.Info("meta: new cluster: feature flag left disabled", "flag", f.Name, "err", err)
				}
				break
			}
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
}

// TopologyCommands reports whether the cluster has enabled topology
// commands (featureflags.TopologyCommands): ProposeTopology's choice of
// encoding.
func (g *Group) TopologyCommands() bool {
	return g.c.Flags.Enabled(featureflags.TopologyCommands)
}

// ProposeTopology implements exchange.TopologyProposer: it chooses c's
// encoding. With topology commands enabled (featureflags.TopologyCommands)
// c is written as a KindTopology entry; until then (a member of an older
// release may read the log) as a version 1 entry holding the records c
// makes (Config.TopologyRecords: exchange.Broker.RecordsOf), which such a
// member applies as it always did and this release applies as the command
// they stand for (exchange.Broker.ApplyMeta). A command that makes no
// records is not written. It returns when the entry is committed and
// applied on this node, at most ProposeTimeout later.
func (g *Group) ProposeTopology(c exchange.TopologyCommand) error {
	ctx, cancel := context.WithTimeout(context.Background(), ProposeTimeout)
	defer cancel()
	if g.TopologyCommands() {
		cmd := Command{Kind: KindTopology, Topology: c}
		if err := g.gate(cmd); err != nil {
			return err
		}
		return g.propose(ctx, EncodeCommand(cmd))
	}
	if g.c.TopologyRecords == nil {
		return fmt.Errorf("meta: %v: topology commands are not enabled and this node has no records for them", c.Op)
	}
	ops, err := g.c.TopologyRecords(c)
	if err != nil || len(ops) == 0 {
		return err
	}
	return g.propose(ctx, EncodeOps(ops))
}

// UserCommands implements auth.Proposer: whether the cluster has enabled
// typed commands (featureflags.TopologyCommands), users commands included.
func (g *Group) UserCommands() bool {
	return g.c.Flags.Enabled(featureflags.TopologyCommands)
}

// ProposeUsers implements auth.Proposer: cmd (an encoded auth.Command) is
// written as a KindUsers entry, once its flag is enabled (gate), and
// ProposeUsers returns when it is committed and applied on this node, at
// most ProposeTimeout later.
func (g *Group) ProposeUsers(cmd []byte) error {
	return g.proposeOpaque(Command{Kind: KindUsers, Users: cmd})
}

// ParameterCommands implements shovel.Proposer: whether the cluster has
// enabled typed commands (featureflags.TopologyCommands), parameter
// commands included.
func (g *Group) ParameterCommands() bool {
	return g.c.Flags.Enabled(featureflags.TopologyCommands)
}

// ProposeParameters implements shovel.Proposer: cmd (an encoded
// shovel.Command) is written as a KindParameters entry, as ProposeUsers.
func (g *Group) ProposeParameters(cmd []byte) error {
	return g.proposeOpaque(Command{Kind: KindParameters, Params: cmd})
}

func (g *Group) proposeOpaque(c Command) error {
	if err := g.gate(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ProposeTimeout)
	defer cancel()
	return g.propose(ctx, EncodeCommand(c))
}
