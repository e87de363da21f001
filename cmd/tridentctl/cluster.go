package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Cluster operations: forget_cluster_node (as rabbitmqctl), rebalance
// quorum (as rabbitmq-queues) and check quorum-critical (as
// rabbitmq-diagnostics check_if_node_is_quorum_critical).

func (cmd *command) forget(o *opts) error {
	if err := o.need(1, 1, "the NODE to forget (it must be stopped)"); err != nil {
		return err
	}
	n := object{kind: "node", name: o.args[0]}
	_, err := cmd.call(n, "DELETE", "/api/nodes/"+esc(o.args[0]), nil)
	return cmd.done(err, n.String()+" forgotten")
}

func (cmd *command) rebalance(o *opts) error {
	if err := o.need(0, 0, "no argument after rebalance quorum"); err != nil {
		return err
	}
	data, err := cmd.call(object{kind: "rebalance", name: "quorum"}, "POST", "/api/rebalance/queues", nil)
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
}

func (cmd *command) checkQuorumCritical(o *opts) error {
	if err := o.need(0, 0, "no argument after check quorum-critical"); err != nil {
		return err
	}
	data, err := cmd.c.do("GET", "/api/health/checks/node-is-quorum-critical", nil)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable {
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

// maintenance is drain and revive (as rabbitmq-upgrade): POST
// /api/nodes/NODE/drain or /revive on the node --url points at, which is
// NODE when it is not given.
func (cmd *command) maintenance(o *opts, op string) error {
	if err := o.need(0, 1, "at most one NODE (default: the node --url points at)"); err != nil {
		return err
	}
	node := ""
	if len(o.args) == 1 {
		node = o.args[0]
	} else {
		data, err := cmd.c.do("GET", "/api/overview", nil)
		if err != nil {
			return err
		}
		var ov struct {
			Node string `json:"node"`
		}
		if err := json.Unmarshal(data, &ov); err != nil {
			return err
		}
		node = ov.Node
	}
	n := object{kind: "node", name: node}
	data, err := cmd.call(n, "POST", "/api/nodes/"+esc(node)+"/"+op, nil)
	if err != nil {
		return err
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if cmd.o.format == "json" {
		return cmd.o.json(v)
	}
	if op == "drain" {
		fmt.Fprintln(cmd.o.w, n.String()+" is in maintenance mode (drained)")
	} else {
		fmt.Fprintln(cmd.o.w, n.String()+" revived: it accepts client connections again")
	}
	if w, ok := v["warning"].(string); ok {
		fmt.Fprintln(cmd.o.w, "warning: "+w)
	}
	return nil
}
