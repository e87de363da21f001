package test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/cluster/raftstore"
	"github.com/trident-broker/trident/cmd/trident/node"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/store"
)

// TestSecurityF13RaftStoreEncrypted: with encryption.key_file set on
// every member, a cluster's Raft store (DATA_DIR/raft: quorum-queue
// messages, the replicated metadata records such as a user's) is
// encrypted as the message store is. After kill -9 no file under any
// node's data directory holds a message body or a user's record in plain
// text; --rotate-encryption-key rewrites the Raft store with a new key
// that the old one does not open; and the restarted cluster still has
// both.
func TestSecurityF13RaftStoreEncrypted(t *testing.T) {
	key := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(key, []byte(hex.EncodeToString(bytes.Repeat([]byte{0x5a}, 32))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := startCluster(t, 3, "--encryption-key-file", key)

	marker := []byte("raftenc-quorum-body-4c1d7e9b02")
	user := "raftenc-user-8e2f5a"
	const queue = "qq-raftenc"

	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: marker})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v", err)
	}
	if code := nodes[1].api(t, "PUT", "/api/users/"+user, map[string]any{"password": "raftenc-pass-19d4c6", "tags": ""}, nil); code/100 != 2 {
		t.Fatalf("create user: HTTP %d", code)
	}
	// Every member has the user's record (and, before it in the
	// metadata group's log, the queue's).
	for _, nd := range nodes {
		eventually(t, 20*time.Second, "the user on "+nd.name, func() bool {
			code, err := nd.tryAPI("GET", "/api/users/"+user, nil, nil)
			return err == nil && code == 200
		})
	}

	for _, nd := range nodes {
		if err := nd.p.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, nd := range nodes {
		raftDir := filepath.Join(nd.p.DataDir, "raft", "badger")
		if ents, err := os.ReadDir(raftDir); err != nil || len(ents) == 0 {
			t.Fatalf("%s: no Raft store in %s (%v): the test would be blind", nd.name, raftDir, err)
		}
		if dataContains(t, nd.p.DataDir, marker) {
			t.Errorf("%s: the quorum queue's message is on disk in plain text", nd.name)
		}
		if dataContains(t, nd.p.DataDir, []byte(user)) {
			t.Errorf("%s: the user's record is on disk in plain text", nd.name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// trident --rotate-encryption-key on every (stopped) member rewrites
	// its Raft store too: afterwards the old key opens none of it.
	newKey := filepath.Join(t.TempDir(), "new.key")
	newHex := []byte(hex.EncodeToString(bytes.Repeat([]byte{0xa5}, 32)))
	if err := os.WriteFile(newKey, newHex, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		var cfg conf.Config
		cfg.DataDir = nd.p.DataDir
		cfg.Encryption.KeyFile, cfg.Encryption.RotateTo = key, newKey
		if err := node.RotateEncryptionKey(cfg, nil); err != nil {
			t.Fatalf("rotate %s: %v", nd.name, err)
		}
		raftDir := filepath.Join(nd.p.DataDir, "raft", "badger")
		db, err := raftstore.Open(raftDir, raftstore.Options{EncryptionKey: bytes.Repeat([]byte{0x5a}, 32)}, nil)
		if err == nil {
			_ = db.Close()
			t.Fatalf("%s: the old key opens the rotated Raft store", nd.name)
		}
		if !errors.Is(err, store.ErrEncryptionKey) {
			t.Fatalf("%s: old key on the rotated Raft store: %v", nd.name, err)
		}
	}
	// The members restart with the same flag: the file now holds the new
	// key.
	if err := os.WriteFile(key, newHex, 0o600); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = nd.p.Restart() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restart %s: %v", nodes[i].name, err)
		}
	}
	var got []byte
	eventually(t, 30*time.Second, "the message after the restart", func() bool {
		conn, err := amqp.Dial(nodes[0].url())
		if err != nil {
			return false
		}
		defer conn.Close()
		c, err := conn.Channel()
		if err != nil {
			return false
		}
		d, ok, err := c.Get(queue, true)
		if err != nil || !ok {
			return false
		}
		got = d.Body
		return true
	})
	if !bytes.Equal(got, marker) {
		t.Fatalf("after the restart the queue gave %q", got)
	}
	eventually(t, 20*time.Second, "the user after the restart", func() bool {
		code, err := nodes[2].tryAPI("GET", "/api/users/"+user, nil, nil)
		return err == nil && code == 200
	})
}
