package node

import (
	"errors"
	"fmt"
	"net"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/cluster/placement"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/shovel"
)

// In a cluster, shovel definitions are cluster-wide records and each
// shovel runs on one node, placement.Owner's choice. Until this node knows
// the members it runs none.

// shovelOwner is the shovel manager's owner function (placement.OwnerFunc
// over the cluster's members once it runs).
func (n *Node) shovelOwner() func(key string) (bool, string) {
	return placement.OwnerFunc(n.nodeName(), func() []discovery.Member {
		if members := n.clusterMembers.Load(); members != nil {
			return (*members)()
		}
		return nil
	}, func() bool {
		g := n.MetaGroup()
		return g != nil && g.Flags().Enabled(featureflags.ShovelOwnerMixed)
	})
}

// shovelsApplyMeta hands the committed shovel records to the manager.
func (n *Node) shovelsApplyMeta(ops []exchange.MetaOp) error {
	var sops []shovel.MetaOp
	for _, op := range ops {
		if shovel.ReplicatedKey(op.Key) || op.Prefix {
			sops = append(sops, shovel.MetaOp{Key: op.Key, Val: op.Val, Prefix: op.Prefix})
		}
	}
	if len(sops) == 0 || n.shovels == nil {
		return nil
	}
	return n.shovels.ApplyMeta(sops)
}

// shovelsApplyCommitted applies a committed parameter command to the
// shovels and returns its record for the metadata group's applier.
func (n *Node) shovelsApplyCommitted(cmd []byte) ([]exchange.MetaOp, error) {
	if n.shovels == nil {
		return nil, nil
	}
	recs, err := n.shovels.ApplyCommittedEntry(cmd)
	ops := make([]exchange.MetaOp, len(recs))
	for i, r := range recs {
		ops[i] = exchange.MetaOp{Key: r.Key, Val: r.Val}
	}
	return ops, err
}

// serveAMQP serves an AMQP listener (plain or TLS) on which the shovels'
// own connections are never "from loopback" (shovel.Sockets).
func (n *Node) serveAMQP(ln net.Listener) error {
	return n.amqp.Serve(n.shovelSockets.Listener(ln))
}

// declareBridges runs the configuration file's MQTT bridges (on this
// node, as their user, default_user unless set).
func (n *Node) declareBridges() error {
	for i, b := range n.cfg.MQTT.Bridges {
		vh, user := b.VHost, b.User
		if vh == "" {
			vh = n.cfg.DefaultVHost
		}
		if user == "" {
			user = n.cfg.DefaultUser
		}
		err := n.shovels.DeclareStatic(vh, b.Name, user, b.Value())
		var fe *shovel.FieldError
		if errors.As(err, &fe) {
			return fmt.Errorf("conf: %s: %s", conf.BridgeKey(i, fe.Field), fe.Msg)
		}
		if err != nil {
			return fmt.Errorf("node: mqtt.bridges[%d]: %w", i, err)
		}
	}
	return nil
}
