package test

import (
	"testing"
	"time"
)

// TestClusterOperatorPolicy: an operator policy PUT on node 0 is
// replicated to every node and applies to a queue living on node 1;
// deleting it on node 2 lifts it everywhere.
func TestClusterOperatorPolicy(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch1 := dialNode(t, nodes[1])
	if _, err := ch1.QueueDeclare("clop.q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	op := map[string]any{"pattern": `^clop\.`, "definition": map[string]any{"max-length": 2}}
	if code := nodes[0].api(t, "PUT", "/api/operator-policies/%2F/cap", op, nil); code != 201 {
		t.Fatalf("PUT operator policy: %d", code)
	}
	for _, nd := range nodes {
		eventually(t, 10*time.Second, "operator policy on "+nd.name, func() bool {
			var p map[string]any
			code, err := nd.tryAPI("GET", "/api/operator-policies/%2F/cap", nil, &p)
			return err == nil && code == 200 && p["pattern"] == `^clop\.`
		})
	}
	eventually(t, 10*time.Second, "clop.q capped on node 1", func() bool {
		var q map[string]any
		code, err := nodes[1].tryAPI("GET", "/api/queues/%2F/clop.q", nil, &q)
		eff, _ := q["effective_policy_definition"].(map[string]any)
		return err == nil && code == 200 && q["operator_policy"] == "cap" && num(eff["max-length"]) == 2
	})
	if code := nodes[2].api(t, "DELETE", "/api/operator-policies/%2F/cap", nil, nil); code != 204 {
		t.Fatalf("DELETE operator policy: %d", code)
	}
	for _, nd := range nodes {
		eventually(t, 10*time.Second, "operator policy gone on "+nd.name, func() bool {
			code, _ := nd.tryAPI("GET", "/api/operator-policies/%2F/cap", nil, nil)
			return code == 404
		})
	}
	eventually(t, 10*time.Second, "clop.q free on node 1", func() bool {
		var q map[string]any
		code, err := nodes[1].tryAPI("GET", "/api/queues/%2F/clop.q", nil, &q)
		return err == nil && code == 200 && q["operator_policy"] == nil
	})
}
