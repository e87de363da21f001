package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// opsCluster is a fakeCluster with the cluster operations.
type opsCluster struct {
	fakeCluster
	critical []CriticalQueue
	forgot   []string
	moves    []LeaderMove
}

func (o *opsCluster) QuorumCritical() []CriticalQueue { return o.critical }
func (o *opsCluster) ForgetClusterNode(node string) error {
	switch node {
	case "trident@a":
		return ErrNodeIsSelf
	case "trident@b":
		return fmt.Errorf("%w: %s", ErrNodeRunning, node)
	case "trident@c":
		o.forgot = append(o.forgot, node)
		return nil
	}
	return ErrNodeUnknown
}
func (o *opsCluster) RebalanceQuorum() ([]LeaderMove, error) { return o.moves, nil }

func callAPI(t *testing.T, s *Server, method, path string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	req.SetBasicAuth("guest", "guest")
	req.RemoteAddr = "127.0.0.1:1234"
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

// TestClusterOpsAPI: node-is-quorum-critical answers 503 naming the
// queues (RabbitMQ's shape) and 200 without any or standalone; DELETE
// /api/nodes/{node} maps the forgetter's refusals; POST
// /api/rebalance/queues answers the moves.
func TestClusterOpsAPI(t *testing.T) {
	oc := &opsCluster{fakeCluster: fakeCluster{{Name: "trident@a", Running: true, Status: "alive"}}}
	s := newNodesServer(t, oc)
	const check = "/api/health/checks/node-is-quorum-critical"
	if code, body := callAPI(t, s, "GET", check); code != http.StatusOK {
		t.Fatalf("no critical queue: %d %s", code, body)
	}
	oc.critical = []CriticalQueue{{VHost: "/", Name: "orders", Members: []string{"trident@a", "trident@b", "trident@c"}, Online: []string{"trident@a", "trident@b"}}}
	code, body := callAPI(t, s, "GET", check)
	var failed struct {
		Status string `json:"status"`
		Queues []struct {
			Name  string `json:"name"`
			VHost string `json:"virtual_host"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(body, &failed); code != http.StatusServiceUnavailable || err != nil || failed.Status != "failed" ||
		len(failed.Queues) != 1 || failed.Queues[0].Name != "orders" || failed.Queues[0].VHost != "/" {
		t.Fatalf("critical: %d %s %v", code, body, err)
	}
	if code, _ := callAPI(t, newNodesServer(t, nil), "GET", check); code != http.StatusOK {
		t.Fatalf("standalone: %d", code)
	}
	for node, want := range map[string]int{"trident@a": 409, "trident@b": 409, "trident@c": 204, "trident@z": 404} {
		if code, body := callAPI(t, s, "DELETE", "/api/nodes/"+node); code != want {
			t.Errorf("forget %s: %d %s, want %d", node, code, body, want)
		}
	}
	if len(oc.forgot) != 1 || oc.forgot[0] != "trident@c" {
		t.Errorf("forgotten: %v", oc.forgot)
	}
	oc.moves = []LeaderMove{{VHost: "/", Name: "orders", From: "trident@a", To: "trident@b"}}
	code, body = callAPI(t, s, "POST", "/api/rebalance/queues")
	var rb struct {
		Moves []LeaderMove `json:"moves"`
	}
	if err := json.Unmarshal(body, &rb); code != http.StatusOK || err != nil || len(rb.Moves) != 1 || rb.Moves[0].To != "trident@b" {
		t.Fatalf("rebalance: %d %s %v", code, body, err)
	}
}
