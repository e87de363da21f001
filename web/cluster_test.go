package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

type fakeCluster []ClusterMember

func (f fakeCluster) ClusterMembers() []ClusterMember { return f }

func newNodesServer(t *testing.T, c Cluster) *Server {
	t.Helper()
	st := store.NewMemory()
	b, err := exchange.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	users, err := auth.New(st, auth.Options{DefaultUser: "guest", DefaultPass: "guest"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Users: users, Core: b, Node: "trident@a", StatsInterval: time.Hour, Cluster: c})
	t.Cleanup(s.Close)
	return s
}

func getNodes(t *testing.T, s *Server, path string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	req.SetBasicAuth("guest", "guest")
	req.RemoteAddr = "127.0.0.1:1234"
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

// TestNodesCluster: /api/nodes lists every member, the local one with its
// statistics, remote ones with running and their metadata; without a
// cluster it is the local node alone.
func TestNodesCluster(t *testing.T) {
	s := newNodesServer(t, fakeCluster{
		{Name: "trident@a", Running: true, Status: "alive", GossipAddr: "127.0.0.1:1", Meta: map[string]string{"amqp": "127.0.0.1:5672"}},
		{Name: "trident@b", Running: false, Status: "dead", GossipAddr: "127.0.0.1:2", Meta: map[string]string{"http": "127.0.0.1:15673"}},
	})
	code, body := getNodes(t, s, "/api/nodes")
	var nodes []map[string]any
	if err := json.Unmarshal(body, &nodes); code != http.StatusOK || err != nil || len(nodes) != 2 {
		t.Fatalf("%d %s %v", code, body, err)
	}
	a, b := nodes[0], nodes[1]
	if a["name"] != "trident@a" || a["running"] != true || a["type"] != "disc" || a["uptime"] == nil || a["amqp_addr"] != "127.0.0.1:5672" {
		t.Errorf("local: %v", a)
	}
	if b["name"] != "trident@b" || b["running"] != false || b["type"] != "disc" || b["cluster_status"] != "dead" || b["http_addr"] != "127.0.0.1:15673" || b["uptime"] != nil {
		t.Errorf("remote: %v", b)
	}
	if code, body := getNodes(t, s, "/api/nodes/trident@b"); code != http.StatusOK {
		t.Errorf("get remote: %d %s", code, body)
	}
	if code, _ := getNodes(t, s, "/api/nodes/trident@c"); code != http.StatusNotFound {
		t.Errorf("get unknown: %d", code)
	}

	single := newNodesServer(t, nil)
	code, body = getNodes(t, single, "/api/nodes")
	nodes = nil
	if err := json.Unmarshal(body, &nodes); code != http.StatusOK || err != nil || len(nodes) != 1 || nodes[0]["name"] != "trident@a" || nodes[0]["running"] != true {
		t.Fatalf("single: %d %s %v", code, body, err)
	}
	if code, _ := getNodes(t, single, "/api/nodes/trident@a"); code != http.StatusOK {
		t.Errorf("get single: %d", code)
	}
}
