package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
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

// raftCluster is a fakeCluster whose nodes run Raft: b leads the metadata
// group and the local node leads two quorum queues.
type raftCluster struct {
	fakeCluster
	leader string
	led    []string
}

func (r raftCluster) MetaLeader() string       { return r.leader }
func (r raftCluster) QuorumLeaderOf() []string { return r.led }

func getJSON(t *testing.T, s *Server, path string, out any) {
	t.Helper()
	code, body := getNodes(t, s, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// TestNodesLeaders: with a Cluster that reports Raft leaders, every node
// of /api/nodes says whether it leads the metadata group and the local one
// lists the quorum queues it leads; without one (a gossip-only cluster or
// a single node) neither field appears.
func TestNodesLeaders(t *testing.T) {
	members := fakeCluster{
		{Name: "trident@a", Running: true, Status: "alive"},
		{Name: "trident@b", Running: true, Status: "alive", Meta: map[string]string{"raft": "127.0.0.1:3"}},
		{Name: "trident@c", Running: false, Status: "dead"},
	}
	for _, tc := range []struct {
		name       string
		cluster    Cluster
		wantLeader map[string]bool // nil: no meta_leader field
		wantLed    []any           // nil: no quorum_leader_of field
	}{
		{"raft", raftCluster{members, "trident@b", []string{"//orders", "v1/jobs"}},
			map[string]bool{"trident@a": false, "trident@b": true, "trident@c": false}, []any{"//orders", "v1/jobs"}},
		{"no leader yet", raftCluster{members, "", nil},
			map[string]bool{"trident@a": false, "trident@b": false, "trident@c": false}, []any{}},
		{"local leads", raftCluster{members, "trident@a", nil},
			map[string]bool{"trident@a": true, "trident@b": false, "trident@c": false}, []any{}},
		{"gossip only", members, nil, nil},
		{"single node", nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newNodesServer(t, tc.cluster)
			var nodes []map[string]any
			getJSON(t, s, "/api/nodes", &nodes)
			for _, n := range nodes {
				name, _ := n["name"].(string)
				ml, has := n["meta_leader"]
				switch {
				case tc.wantLeader == nil && has:
					t.Errorf("%s: meta_leader %v, want none", name, ml)
				case tc.wantLeader != nil && ml != tc.wantLeader[name]:
					t.Errorf("%s: meta_leader %v, want %v", name, ml, tc.wantLeader[name])
				}
				led, has := n["quorum_leader_of"]
				switch {
				case name != "trident@a" || tc.wantLed == nil:
					if has {
						t.Errorf("%s: quorum_leader_of %v, want none", name, led)
					}
				case !reflect.DeepEqual(led, tc.wantLed):
					t.Errorf("%s: quorum_leader_of %#v, want %#v", name, led, tc.wantLed)
				}
			}
			// GET /api/nodes/{name} answers the same entry.
			var one map[string]any
			getJSON(t, s, "/api/nodes/trident@a", &one)
			if tc.wantLeader != nil && one["meta_leader"] != tc.wantLeader["trident@a"] {
				t.Errorf("GET one: meta_leader %v", one["meta_leader"])
			}
		})
	}
}

// TestOverviewClusterName: a single node names the cluster after itself;
// in a cluster every node gives the first member's name, whatever its own.
func TestOverviewClusterName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster Cluster
		want    string
	}{
		{"single node", nil, "trident@a"},
		{"local first", fakeCluster{{Name: "trident@a"}, {Name: "trident@b"}}, "trident@a"},
		{"other first", fakeCluster{{Name: "rabbit@0"}, {Name: "trident@a"}}, "rabbit@0"},
		{"not yet listed", fakeCluster{}, "trident@a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ov map[string]any
			getJSON(t, newNodesServer(t, tc.cluster), "/api/overview", &ov)
			if ov["cluster_name"] != tc.want || ov["node"] != "trident@a" {
				t.Errorf("cluster_name %v node %v, want %s trident@a", ov["cluster_name"], ov["node"], tc.want)
			}
		})
	}
}

// TestNodesMemberMeta: /api/nodes shows a member's listener addresses
// (amqp_addr, http_addr, raft_addr) and being_drained from Drained; the
// other keys a node gossips (feature flags, members catching up, the
// maintenance key) are not shown as addresses.
func TestNodesMemberMeta(t *testing.T) {
	meta := map[string]string{"amqp": "127.0.0.1:5672", "http": "127.0.0.1:15672", "raft": "127.0.0.1:25672",
		"ff": "topology_commands", "catching-up": "trident@c", "maintenance": "drained"}
	s := newNodesServer(t, fakeCluster{
		{Name: "trident@a", Running: true, Status: "alive", Meta: meta},
		{Name: "trident@b", Running: true, Status: "alive", Meta: meta, Drained: true},
		{Name: "trident@c", Running: true, Status: "alive", Meta: map[string]string{"amqp": "127.0.0.1:5673"}},
	})
	var nodes []map[string]any
	getJSON(t, s, "/api/nodes", &nodes)
	if len(nodes) != 3 {
		t.Fatalf("nodes: %v", nodes)
	}
	for _, n := range nodes[:2] {
		for k, want := range map[string]string{"amqp_addr": "127.0.0.1:5672", "http_addr": "127.0.0.1:15672", "raft_addr": "127.0.0.1:25672"} {
			if n[k] != want {
				t.Errorf("%s: %s %v, want %s", n["name"], k, n[k], want)
			}
		}
		for _, k := range []string{"ff_addr", "catching-up_addr", "maintenance_addr"} {
			if v, ok := n[k]; ok {
				t.Errorf("%s: %s %v shown", n["name"], k, v)
			}
		}
	}
	if b, c := nodes[1], nodes[2]; b["being_drained"] != true || c["being_drained"] != false {
		t.Errorf("being_drained: b %v, c %v", b["being_drained"], c["being_drained"])
	}
}
