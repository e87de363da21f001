package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/web"
)

// featureFlagsView is the API's view of the feature flags: the metadata
// group's in a cluster; standalone, every flag of this release is
// enabled (no other node has to read what this one writes).
type featureFlagsView struct{ n *Node }

var _ web.FeatureFlags = featureFlagsView{}

func (v featureFlagsView) FeatureFlags() []web.FeatureFlag {
	var st []featureflags.Status
	if g := v.n.MetaGroup(); g != nil {
		st = g.FeatureFlags()
	} else {
		all := featureflags.NewSet()
		for _, name := range featureflags.Supported() {
			all.Enable(name)
		}
		st = featureflags.Report(all, nil)
	}
	out := make([]web.FeatureFlag, len(st))
	for i, s := range st {
		out[i] = web.FeatureFlag{Name: s.Name, Desc: s.Desc, Stability: string(s.Stability), ProvidedBy: "trident",
			Release: s.Release, State: s.State, MissingOn: s.Missing}
	}
	return out
}

func (v featureFlagsView) EnableFeatureFlag(ctx context.Context, name string) error {
	g := v.n.MetaGroup()
	if g == nil {
		if _, ok := featureflags.Lookup(name); !ok {
			return fmt.Errorf("%w: %q", web.ErrFeatureFlagUnknown, name)
		}
		return nil
	}
	err := g.EnableFeatureFlag(ctx, name)
	switch {
	case errors.Is(err, featureflags.ErrUnknown):
		return fmt.Errorf("%w: %q", web.ErrFeatureFlagUnknown, name)
	case errors.Is(err, featureflags.ErrUnsupported):
		return fmt.Errorf("%w: %v", web.ErrFeatureFlagUnsupported, err)
	}
	return err
}
