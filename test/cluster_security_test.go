package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/test/testbin"
)

// nodeCert writes a node certificate for cn signed by ca (cert and key
// files in p's directory) and returns the two paths.
func (p *testPKI) nodeCert(cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certFile, keyFile string) {
	p.t.Helper()
	der, k := p.sign(&x509.Certificate{SerialNumber: p.nextSerial(), Subject: pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, ca, caKey)
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		p.t.Fatal(err)
	}
	certFile = filepath.Join(p.dir, cn+".pem")
	keyFile = filepath.Join(p.dir, cn+".key")
	p.write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	p.write(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return certFile, keyFile
}

func gossipKey(t *testing.T) string {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// launchJoiner starts one more node that joins seed's gossip with
// bootstrap_expect 0 (it waits to be added), with extra arguments; it
// returns the process and its HTTP address.
func launchJoiner(t *testing.T, name string, seed *cnode, extra ...string) (*testbin.Proc, string) {
	t.Helper()
	bin, err := testbin.Binary()
	if err != nil {
		t.Fatal(err)
	}
	hp, _ := testbin.FreePort()
	rp, _ := testbin.FreePort()
	gp, _ := testbin.FreeTCPUDPPort()
	web := net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))
	args := append([]string{"--http-listen", web, "--cluster-node-name", name,
		"--cluster-gossip-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(gp)),
		"--cluster-raft-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(rp)),
		"--cluster-cookie", "test-cookie", "--join", seed.gossip}, extra...)
	p, err := testbin.Launch(context.Background(), testbin.Options{Binary: bin,
		DataDir: filepath.Join(t.TempDir(), "data"), ExtraArgs: args})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() && p.LogPath != "" {
			if b, err := os.ReadFile(p.LogPath); err == nil {
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("tail of %s's log:\n%s", name, b)
			}
		}
		p.Cleanup()
	})
	return p, web
}

// TestClusterSecurity (issue 16, part 5): three nodes with node
// certificates of one CA (mutual TLS on the inter-node port) and a gossip
// key form a cluster and replicate; a node with the right gossip key but
// a certificate of another CA is never given the metadata (its TLS
// handshakes are refused, the cluster keeps serving); a node with a
// certificate of the right CA but another gossip key never becomes a
// member.
func TestClusterSecurity(t *testing.T) {
	p := newPKI(t)
	rogueCA, rogueKey := p.makeCA("Rogue CA")
	key := gossipKey(t)
	tlsArgs := func(cert, keyFile, ca string) []string {
		return []string{"--cluster-tls-cert-file", cert, "--cluster-tls-key-file", keyFile, "--cluster-tls-ca-file", ca}
	}
	// Certificates first: perNode runs on the nodes' start goroutines.
	args := make([][]string, 3)
	for i := range args {
		c, k := p.nodeCert(fmt.Sprintf("trident-%d", i), p.ca, p.caKey)
		args[i] = append(tlsArgs(c, k, p.caFile), "--cluster-gossip-key", key)
	}
	nodes := startClusterWith(t, 3, func(i int) []string { return args[i] })
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare("secured", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		eventually(t, 10*time.Second, "the queue on "+nd.name, func() bool {
			code, _ := nd.tryAPI("GET", "/api/queues/%2F/secured", nil, nil)
			return code == 200
		})
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("secured-qq", true, false, false, false, map[string]any{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := confirmOne(ch, "secured-qq", 10*time.Second); err != nil {
		t.Fatalf("quorum queue over mutual TLS: %v", err)
	}

	// The right gossip key, a certificate of another CA.
	rc, rk := p.nodeCert("rogue-cert", rogueCA, rogueKey)
	rogueCAFile := filepath.Join(p.dir, "rogue-ca.pem")
	p.write(rogueCAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rogueCA.Raw}))
	_, rogueWeb := launchJoiner(t, "rogue-cert@localhost", nodes[0], append(tlsArgs(rc, rk, rogueCAFile), "--cluster-gossip-key", key)...)
	// Its own CA trusted by it, ours by us: neither side accepts the other.
	time.Sleep(5 * time.Second)
	if code, _ := (&cnode{web: rogueWeb}).tryAPI("GET", "/api/queues/%2F/secured", nil, nil); code == 200 {
		t.Fatal("a node with a certificate of another CA got the cluster's metadata")
	}
	if err := confirmOne(ch, "secured-qq", 10*time.Second); err != nil {
		t.Fatalf("the cluster stopped serving with the rogue node around: %v", err)
	}
	refused, notAdded := false, false
	for _, nd := range nodes {
		if b, err := os.ReadFile(nd.p.LogPath); err == nil {
			refused = refused || strings.Contains(string(b), "TLS handshake failed")
			for _, l := range strings.Split(string(b), "\n") {
				notAdded = notAdded || (strings.Contains(l, "member not added") && strings.Contains(l, "rogue-cert"))
			}
		}
	}
	if !refused {
		t.Error("no node logged a refused TLS handshake")
	}
	if !notAdded {
		t.Error("the metadata leader did not refuse to make the rogue node a voter")
	}
	// Issue 38, F9: nor is it ever a queue's member, even when the
	// queue asks for more members than the cluster has.
	if _, err := ch.QueueDeclare("secured-qq4", true, false, false, false,
		map[string]any{"x-queue-type": "quorum", "x-quorum-initial-group-size": 4}); err != nil {
		t.Fatalf("quorum queue of 4 with the rogue node around: %v", err)
	}
	if err := confirmOne(ch, "secured-qq4", 10*time.Second); err != nil {
		t.Fatalf("quorum queue of 4 with the rogue node around: %v", err)
	}
	var q4 struct {
		Members []string `json:"members"`
	}
	nodes[0].api(t, "GET", "/api/queues/%2F/secured-qq4", nil, &q4)
	if len(q4.Members) != 3 || strings.Contains(strings.Join(q4.Members, ","), "rogue") {
		t.Fatalf("secured-qq4 members %v, want the three nodes of the cluster's CA", q4.Members)
	}

	// A certificate of our CA, another gossip key.
	gc, gk := p.nodeCert("wrong-key", p.ca, p.caKey)
	_, wrongWeb := launchJoiner(t, "wrong-key@localhost", nodes[0], append(tlsArgs(gc, gk, p.caFile), "--cluster-gossip-key", gossipKey(t))...)
	time.Sleep(5 * time.Second)
	for _, nd := range nodes {
		var ms []struct {
			Name string `json:"name"`
		}
		nd.api(t, "GET", "/api/nodes", nil, &ms)
		for _, m := range ms {
			if m.Name == "wrong-key@localhost" {
				t.Fatalf("%s lists the node with the wrong gossip key", nd.name)
			}
		}
	}
	if code, _ := (&cnode{web: wrongWeb}).tryAPI("GET", "/api/queues/%2F/secured", nil, nil); code == 200 {
		t.Fatal("a node with the wrong gossip key got the cluster's metadata")
	}
}
