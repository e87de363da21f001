package test

import (
	"fmt"
	"net"
	"strconv"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

// TestSTOMPReceiptSurvivesKill: every persistent SEND whose RECEIPT came
// back is in its queue after kill -9 and a restart (the durability
// contract), including those of a committed transaction.
func TestSTOMPReceiptSurvivesKill(t *testing.T) {
	port, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := testbin.Start(t, "--stomp-listen", addr)

	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &stRaw{t: t, nc: nc, r: stFrameReader(nc)}
	t.Cleanup(func() { nc.Close() })
	r.connect()
	const n = 500
	var batch []byte
	for i := 0; i < n; i++ {
		batch = fmt.Appendf(batch, "SEND\ndestination:/queue/stomp-crash\npersistent:true\nreceipt:r%d\n\n%d\x00", i, i)
	}
	batch = append(batch, "BEGIN\ntransaction:t\n\n\x00"...)
	for i := n; i < n+10; i++ {
		batch = fmt.Appendf(batch, "SEND\ndestination:/queue/stomp-crash\npersistent:true\ntransaction:t\n\n%d\x00", i)
	}
	batch = append(batch, "COMMIT\ntransaction:t\nreceipt:commit\n\n\x00"...)
	r.write(string(batch))
	for i := 0; i <= n; i++ {
		want := "commit"
		if i < n {
			want = "r" + strconv.Itoa(i)
		}
		f := r.read()
		if f.Command != "RECEIPT" || f.Header.Get("receipt-id") != want {
			t.Fatalf("want RECEIPT %s, got %s %v %q", want, f.Command, f.Header, f.Body)
		}
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	p.Restart()

	conn, err := amqp.Dial(p.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive("stomp-crash", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != n+10 {
		t.Fatalf("%d messages after kill -9, want %d", q.Messages, n+10)
	}
}
