package test

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestClusterUserCommands (issue 43): with topology_commands on, users,
// permissions and topic permissions travel as typed users commands that
// every node applies. A user made on node 0, its permission set on node 1
// and its topic permission on node 2 are on every node (the user logs in
// everywhere: its password hash was decided once); a non-administrator's
// change of the user database is refused on any node and changes nothing
// anywhere; a node killed with kill -9 comes back with the user and its
// permissions; the user's delete on that node removes it everywhere.
func TestClusterUserCommands(t *testing.T) {
	nodes := startCluster(t, 3)
	for _, nd := range nodes {
		eventually(t, 60*time.Second, "topology_commands enabled on "+nd.name, func() bool {
			f, err := flagOn(nd, "topology_commands")
			return err == nil && f.State == "enabled"
		})
	}
	admin := func(nd *cnode) apiClient {
		return apiClient{t: t, base: "http://" + nd.web, user: "guest", pass: "guest"}
	}
	admin(nodes[0]).expect(201, "PUT", "/api/users/uc-alice", map[string]any{"password": "pw-a", "tags": "management"})
	admin(nodes[1]).expect(201, "PUT", "/api/permissions/%2F/uc-alice", map[string]any{"configure": "^uc-", "write": ".*", "read": ".*"})
	admin(nodes[2]).expect(201, "PUT", "/api/topic-permissions/%2F/uc-alice", map[string]any{"exchange": "amq.topic", "write": "^a", "read": ".*"})

	aliceURL := func(nd *cnode) string { return strings.Replace(nd.url(), "guest:guest@", "uc-alice:pw-a@", 1) }
	loggedIn := func(nd *cnode) bool {
		conn, err := amqp.Dial(aliceURL(nd))
		if err != nil {
			return false
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return false
		}
		// Her configure permission is the one set on node 1.
		_, err = ch.QueueDeclare("uc-q-"+nd.name, false, true, false, false, nil)
		return err == nil
	}
	hasTopicPerm := func(nd *cnode) bool {
		var ps []map[string]any
		code, err := nd.tryAPI("GET", "/api/topic-permissions/%2F/uc-alice", nil, &ps)
		return err == nil && code == 200 && len(ps) == 1 && ps[0]["write"] == "^a"
	}
	for _, nd := range nodes {
		eventually(t, 20*time.Second, "uc-alice logs in on "+nd.name+" and holds her permissions", func() bool {
			return loggedIn(nd) && hasTopicPerm(nd)
		})
	}

	// uc-alice is no administrator: her changes are refused on any node,
	// and none is made anywhere.
	alice := admin(nodes[2]).as("uc-alice", "pw-a")
	alice.expect(401, "PUT", "/api/users/uc-mallory", map[string]any{"password": "m", "tags": "administrator"})
	alice.expect(401, "PUT", "/api/permissions/%2F/uc-alice", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	for _, nd := range nodes {
		if code, _ := nd.tryAPI("GET", "/api/users/uc-mallory", nil, nil); code != 404 {
			t.Fatalf("%s: a refused change made uc-mallory (%d)", nd.name, code)
		}
		var p map[string]any
		if code, err := nd.tryAPI("GET", "/api/permissions/%2F/uc-alice", nil, &p); err != nil || code != 200 || p["configure"] != "^uc-" {
			t.Fatalf("%s: uc-alice's permission %v (%d, %v) after a refused change", nd.name, p, code, err)
		}
	}

	// kill -9: the node's own store holds what it applied.
	victim := nodes[1]
	if err := victim.p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := victim.p.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "uc-alice logs in on "+victim.name+" after kill -9", func() bool {
		return loggedIn(victim) && hasTopicPerm(victim)
	})

	admin(victim).expect(204, "DELETE", "/api/users/uc-alice", nil)
	for _, nd := range nodes {
		eventually(t, 20*time.Second, "uc-alice gone from "+nd.name, func() bool {
			code, _ := nd.tryAPI("GET", "/api/users/uc-alice", nil, nil)
			return code == 404 && !loggedIn(nd)
		})
		var ps []map[string]any
		if code, err := nd.tryAPI("GET", "/api/topic-permissions/%2F/uc-alice", nil, &ps); err == nil && code == 200 && len(ps) > 0 {
			t.Fatalf("%s: uc-alice's topic permission outlived her: %v", nd.name, ps)
		}
	}
}
