package web

import (
	"strings"
	"sync/atomic"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// RaftGroup is one of this node's Raft groups as /metrics sees it.
type RaftGroup struct {
	Name                      string // "meta", or "q/<id>" for a quorum queue or clustered stream
	Leader                    bool   // this node leads it
	Term                      uint64
	CommitIndex, AppliedIndex uint64
}

// raftKind is the label of a group: "meta" or "queue". Thousands of
// quorum queues are thousands of groups: they are summed by kind, never
// exported one series each.
func raftKind(name string) string {
	if strings.HasPrefix(name, "q/") {
		return "queue"
	}
	return name
}

var (
	mRaftGroups   = desc("trident_raft_groups", "Raft groups this node is a member of, by kind (meta, queue)", "kind")
	mRaftLeaders  = desc("trident_raft_groups_led", "Raft groups this node leads, by kind", "kind")
	mRaftTerm     = desc("trident_raft_term_max", "The highest current Raft term among the groups of a kind (for meta: its term)", "kind")
	mRaftCommit   = desc("trident_raft_commit_index_sum", "Sum of the groups' commit indexes, by kind (its rate is log entries committed per second)", "kind")
	mRaftApplied  = desc("trident_raft_applied_index_sum", "Sum of the groups' applied indexes, by kind", "kind")
	mRaftLeaderCh = desc("trident_raft_leader_changes_total", "Times a Raft group on this node became leader (all groups)")
	mRaftElection = desc("trident_raft_elections_total", "Times a Raft group on this node started an election (all groups)")
)

var raftDescs = []*prometheus.Desc{mRaftGroups, mRaftLeaders, mRaftTerm, mRaftCommit, mRaftApplied, mRaftLeaderCh, mRaftElection}

func (c *coreCollector) collectRaft(ch chan<- prometheus.Metric) {
	if c.opts.RaftGroups == nil {
		return
	}
	type agg struct {
		groups, leaders       int
		term, commit, applied uint64
	}
	kinds := map[string]*agg{"meta": {}, "queue": {}}
	for _, g := range c.opts.RaftGroups() {
		k := kinds[raftKind(g.Name)]
		if k == nil {
			k = &agg{}
			kinds[raftKind(g.Name)] = k
		}
		k.groups++
		if g.Leader {
			k.leaders++
		}
		k.term = max(k.term, g.Term)
		k.commit += g.CommitIndex
		k.applied += g.AppliedIndex
	}
	for name, k := range kinds {
		ch <- prometheus.MustNewConstMetric(mRaftGroups, prometheus.GaugeValue, float64(k.groups), name)
		ch <- prometheus.MustNewConstMetric(mRaftLeaders, prometheus.GaugeValue, float64(k.leaders), name)
		ch <- prometheus.MustNewConstMetric(mRaftTerm, prometheus.GaugeValue, float64(k.term), name)
		ch <- prometheus.MustNewConstMetric(mRaftCommit, prometheus.GaugeValue, float64(k.commit), name)
		ch <- prometheus.MustNewConstMetric(mRaftApplied, prometheus.GaugeValue, float64(k.applied), name)
	}
	if s := c.opts.Raft; s != nil {
		ch <- prometheus.MustNewConstMetric(mRaftLeaderCh, prometheus.CounterValue, float64(s.leader.Load()))
		ch <- prometheus.MustNewConstMetric(mRaftElection, prometheus.CounterValue, float64(s.candidate.Load()))
		s.apply.Collect(ch)
		s.commit.Collect(ch)
	}
}

// RaftSink is a go-metrics sink (hashicorp/raft reports through
// go-metrics' process-wide sink) that keeps what /metrics shows of it:
// leader changes, elections, and the latencies of applying an entry to
// the state machine and of committing one, summed over every group (raft
// gives no group name). Everything else raft reports is dropped.
type RaftSink struct {
	leader, candidate atomic.Uint64
	apply, commit     prometheus.Histogram
}

// NewRaftSink makes the sink; InstallRaftSink makes raft report to it.
func NewRaftSink() *RaftSink {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help,
			Buckets:                     []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
			NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 160})
	}
	return &RaftSink{
		apply:  h("trident_raft_apply_seconds", "Time to apply a committed Raft log entry to its state machine (all groups)"),
		commit: h("trident_raft_commit_seconds", "Time from a leader dispatching a Raft log entry to its commit (all groups led here)"),
	}
}

// InstallRaftSink makes s go-metrics' global sink. go-metrics has one
// per process: the last node started in a process gets raft's reports.
func InstallRaftSink(s *RaftSink) error {
	cfg := gometrics.DefaultConfig("")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics, cfg.EnableServiceLabel = false, false, false
	_, err := gometrics.NewGlobal(cfg, s)
	return err
}

func (s *RaftSink) SetGauge([]string, float32)                              {}
func (s *RaftSink) SetGaugeWithLabels([]string, float32, []gometrics.Label) {}
func (s *RaftSink) EmitKey([]string, float32)                               {}
func (s *RaftSink) IncrCounterWithLabels(k []string, v float32, _ []gometrics.Label) {
	s.IncrCounter(k, v)
}
func (s *RaftSink) AddSampleWithLabels(k []string, v float32, _ []gometrics.Label) { s.AddSample(k, v) }

// IncrCounter counts raft.state.leader and raft.state.candidate.
func (s *RaftSink) IncrCounter(k []string, v float32) {
	if len(k) == 3 && k[0] == "raft" && k[1] == "state" {
		switch k[2] {
		case "leader":
			s.leader.Add(uint64(v))
		case "candidate":
			s.candidate.Add(uint64(v))
		}
	}
}

// AddSample takes raft.fsm.apply and raft.commitTime (milliseconds).
// It is called for every sample raft (and memberlist) takes: it
// compares the key's parts rather than join them, allocating nothing.
func (s *RaftSink) AddSample(k []string, v float32) {
	switch {
	case len(k) == 3 && k[0] == "raft" && k[1] == "fsm" && k[2] == "apply":
		s.apply.Observe(float64(v) / 1e3)
	case len(k) == 2 && k[0] == "raft" && k[1] == "commitTime":
		s.commit.Observe(float64(v) / 1e3)
	}
}
