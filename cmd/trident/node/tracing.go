package node

import (
	"context"
	"fmt"

	"github.com/trident-broker/trident/protocol/frontend/tracing"
)

// startTracing starts the OpenTelemetry tracer the config and the OTEL_*
// variables ask for (nil: off); the front ends get it in their Config.
func (n *Node) startTracing() error {
	c := n.cfg.Tracing
	t, err := tracing.Start(context.Background(), tracing.Config{
		Enabled:     c.Enabled,
		Endpoint:    c.Endpoint,
		Protocol:    c.Protocol,
		SampleRatio: c.SampleRatio,
		ServiceName: c.ServiceName,
		InstanceID:  n.nodeName(),
	}, n.log.With("component", "tracing"))
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.tracer = t
	return nil
}

// closeTracing exports the spans still buffered, once the front ends are
// closed.
func (n *Node) closeTracing(ctx context.Context) error {
	if err := n.tracer.Shutdown(ctx); err != nil {
		return fmt.Errorf("node: tracing shutdown: %w", err)
	}
	return nil
}
