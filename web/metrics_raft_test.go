package web

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func TestRaftSinkKeepsLeaderChangesAndLatencies(t *testing.T) {
	s := NewRaftSink()
	s.IncrCounter([]string{"raft", "state", "leader"}, 1)
	s.IncrCounter([]string{"raft", "state", "leader"}, 1)
	s.IncrCounter([]string{"raft", "state", "candidate"}, 1)
	s.IncrCounter([]string{"raft", "apply"}, 1)        // not kept
	s.AddSample([]string{"raft", "fsm", "apply"}, 250) // milliseconds
	s.AddSample([]string{"raft", "commitTime"}, 2)
	s.AddSample([]string{"raft", "fsm", "snapshot"}, 9) // not kept
	if s.leader.Load() != 2 || s.candidate.Load() != 1 {
		t.Fatalf("leader %d candidate %d", s.leader.Load(), s.candidate.Load())
	}
	var m dto.Metric
	if err := s.apply.Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.25 {
		t.Fatalf("apply histogram: %v", h)
	}
	if err := s.commit.Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.002 {
		t.Fatalf("commit histogram: %v", h)
	}
}

func TestRaftKind(t *testing.T) {
	for name, want := range map[string]string{"meta": "meta", "q/1f": "queue", "q/%2F/orders": "queue"} {
		if got := raftKind(name); got != want {
			t.Errorf("raftKind(%q) = %q, want %q", name, got, want)
		}
	}
}
