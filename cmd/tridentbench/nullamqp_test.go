package main

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestNullAMQPRelay runs the raw AMQP scenarios against the null relay
// with the real generator: every phase's counts are verified by the
// scenario itself (each consumer received all its publisher sent, and
// with confirms every publish was confirmed), latency included.
func TestNullAMQPRelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go (&nullAMQP{consumers: map[string]*nullConn{}}).serve(ln)
	url := "amqp://guest:guest@" + ln.Addr().String() + "/"
	p := Params{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, MsgSize: 16, MaxInFlight: 2000,
		ConfirmWindow: 1000, Prefetch: 1000, AckEvery: 100, LatencyRates: []int{10}, LatencyDuration: 300 * time.Millisecond}
	for _, s := range []rawAMQPScenario{
		{name: "raw-amqp-transient-autoack"},
		{name: "raw-amqp-persistent-confirm", persistent: true},
		{name: "raw-amqp-10q-autoack", pairs: 10},
	} {
		res, err := s.Run(context.Background(), url, p)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if res.Consumed == 0 || res.Raw == nil || len(res.Raw.Latency) != 1 || res.Raw.Latency[0].Achieved == 0 {
			t.Fatalf("%s: consumed %d, raw %+v", s.name, res.Consumed, res.Raw)
		}
		t.Logf("%s: %.0f msgs/s", s.name, res.ConsumeRate)
	}
}
