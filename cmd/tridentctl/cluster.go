package main

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Cluster operations: forget_cluster_node (as rabbitmqctl), rebalance
// quorum (as rabbitmq-queues) and check quorum-critical (as
// rabbitmq-diagnostics check_if_node_is_quorum_critical).

func (cmd *command) cluster(verb string, a []string) error {
	switch verb {
	case "forget_cluster_node":
		o := newOpts(verb)
		if err := o.parse(a); err != nil {
			return err
		}
		if o.need(1, "forget_cluster_node NODE") != nil {
			return usageError("usage: forget_cluster_node NODE (the node must be stopped)")
		}
		_, _, err := cmd.c.do("DELETE", "/api/nodes/"+esc(o.args[0]), nil)
		return cmd.done(err, "node "+o.args[0]+" forgotten")
	case "rebalance":
		if len(a) != 1 || (a[0] != "quorum" && a[0] != "all") {
			return usageError("usage: rebalance quorum")
		}
		data, _, err := cmd.c.do("POST", "/api/rebalance/queues", nil)
		if err != nil {
			return err
		}
		var v struct {
			Moves []map[string]any `json:"moves"`
		}
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
		if cmd.o.format != "json" && len(v.Moves) == 0 {
			fmt.Fprintln(cmd.o.w, "quorum queue leaders are balanced: nothing to move")
			return nil
		}
		rows := make([]any, len(v.Moves))
		for i, m := range v.Moves {
			rows[i] = m
		}
		return cmd.o.render(rows, []string{"vhost", "name", "from", "to"})
	case "check":
		if len(a) != 1 || a[0] != "quorum-critical" {
			return usageError("usage: check quorum-critical")
		}
		data, _, err := cmd.c.do("GET", "/api/health/checks/node-is-quorum-critical", nil)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == 503 {
			return fmt.Errorf("node is quorum critical: %v", ae.Reason)
		}
		if err != nil {
			return err
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
		if cmd.o.format == "json" {
			return cmd.o.json(v)
		}
		fmt.Fprintln(cmd.o.w, "ok: no quorum queue depends on this node for its majority")
		return nil
	}
	return usageError("unknown command " + verb)
}
