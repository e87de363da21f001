package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"sort"
	"text/tabwriter"
	"time"
)

// report collects runs and aggregates them per (scenario, target).
type report struct {
	Started  time.Time      `json:"started"`
	Host     map[string]any `json:"host"`
	Params   jsonParams     `json:"params"`
	Baseline string         `json:"baseline,omitempty"`
	Notes    []string       `json:"notes,omitempty"`
	Results  []*row         `json:"results"`
}

type jsonParams struct {
	Duration      string `json:"duration"`
	Warmup        string `json:"warmup"`
	Rounds        int    `json:"rounds"`
	MsgSize       int    `json:"msg_size"`
	MaxInFlight   uint64 `json:"max_in_flight"`
	ConfirmWindow int    `json:"confirm_window"`
	Prefetch      int    `json:"prefetch"`
	AckEvery      int    `json:"ack_every"`
}

// row is one (scenario, target): the median over its successful rounds.
type row struct {
	Scenario    string   `json:"scenario"`
	Target      string   `json:"target"`
	URL         string   `json:"url"`
	PublishRate float64  `json:"published_per_sec"`
	ConsumeRate float64  `json:"consumed_per_sec"`
	Ratio       *float64 `json:"ratio,omitempty"` // ConsumeRate / baseline's ConsumeRate
	Runs        []Result `json:"runs"`
	Errors      []string `json:"errors,omitempty"`
}

func newReport(o *options, p Params) *report {
	r := &report{
		Started: time.Now().UTC(),
		Host:    hostInfo(),
		Params: jsonParams{
			Duration: p.Duration.String(), Warmup: p.Warmup.String(), Rounds: o.rounds,
			MsgSize: p.MsgSize, MaxInFlight: p.MaxInFlight, ConfirmWindow: p.ConfirmWindow,
			Prefetch: p.Prefetch, AckEvery: p.AckEvery,
		},
	}
	if o.targets.has(baselineName) {
		r.Baseline = baselineName
	} else if len(o.targets) > 0 {
		r.Baseline = o.targets[0].Name
	}
	return r
}

func (r *report) add(scenario string, t *Target, rawURL string, res Result, err error) {
	var cur *row
	for _, x := range r.Results {
		if x.Scenario == scenario && x.Target == t.Name {
			cur = x
		}
	}
	if cur == nil {
		cur = &row{Scenario: scenario, Target: t.Name, URL: redact(rawURL), Runs: []Result{}}
		r.Results = append(r.Results, cur)
	}
	if err != nil {
		cur.Errors = append(cur.Errors, err.Error())
		return
	}
	cur.Runs = append(cur.Runs, res)
}

// finish computes the medians and the ratios. The median of the rounds, not
// the mean, so that one round disturbed by something else on the machine does
// not move the figure.
func (r *report) finish() {
	for _, x := range r.Results {
		pub := make([]float64, len(x.Runs))
		con := make([]float64, len(x.Runs))
		for i, run := range x.Runs {
			pub[i], con[i] = run.PublishRate, run.ConsumeRate
		}
		x.PublishRate, x.ConsumeRate = median(pub), median(con)
	}
	for _, x := range r.Results {
		for _, b := range r.Results {
			if b.Scenario == x.Scenario && b.Target == r.Baseline && len(b.Runs) > 0 && len(x.Runs) > 0 && b.ConsumeRate > 0 {
				ratio := x.ConsumeRate / b.ConsumeRate
				x.Ratio = &ratio
			}
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *report) writeTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\ttarget\tpublished/s\tconsumed/s\tvs %s\t\n", r.Baseline)
	for _, x := range r.Results {
		ratio := "-"
		if x.Ratio != nil {
			ratio = fmt.Sprintf("%.2fx", *x.Ratio)
		}
		if len(x.Runs) == 0 {
			fmt.Fprintf(tw, "%s\t%s\terror\terror\t%s\t\n", x.Scenario, x.Target, ratio)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\t\n", x.Scenario, x.Target, x.PublishRate, x.ConsumeRate, ratio)
	}
	tw.Flush()
	r.writeRaw(w)
	fmt.Fprintf(w, "\n%s measured, %s warm-up, median of %d round(s), %d-byte bodies; %v CPUs, %s\n",
		r.Params.Duration, r.Params.Warmup, r.Params.Rounds, r.Params.MsgSize, r.Host["cpus"], r.Host["go"])
	fmt.Fprintln(w, "published/s counts broker-confirmed messages in the confirm scenarios; ratio is consumed/s vs", r.Baseline)
	for _, n := range r.Notes {
		fmt.Fprintln(w, n)
	}
	for _, x := range r.Results {
		for _, e := range x.Errors {
			fmt.Fprintf(w, "error: %s %s: %s\n", x.Scenario, x.Target, e)
		}
	}
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}

// human formats a rate for progress lines: 812.3k, 1.02M.
func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// writeRaw prints the raw scenarios' CPU and latency figures (of each
// row's last successful round).
func (r *report) writeRaw(w io.Writer) {
	any := false
	for _, x := range r.Results {
		if n := len(x.Runs); n > 0 && x.Runs[n-1].Raw != nil {
			any = true
		}
	}
	if !any {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\ttarget\tbroker cores\tclient cores\tbroker CPU ns/msg\tconfirm frames/msgs\tdropped\t\n")
	for _, x := range r.Results {
		n := len(x.Runs)
		if n == 0 || x.Runs[n-1].Raw == nil {
			continue
		}
		raw := x.Runs[n-1].Raw
		cf := "-"
		if raw.Confirmed > 0 {
			cf = fmt.Sprintf("%d/%d", raw.ConfirmFrames, raw.Confirmed)
		}
		dropped := "-"
		if raw.Dropped > 0 {
			dropped = fmt.Sprint(raw.Dropped)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.0f\t%s\t%s\t\n", x.Scenario, x.Target, raw.BrokerCores, raw.ClientCores, raw.BrokerNsPerMsg, cf, dropped)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\ttarget\t%% of sat.\toffered/s\tconsumed/s\tp50 µs\tp99 µs\tp99.9 µs\tmax µs\t\n")
	for _, x := range r.Results {
		n := len(x.Runs)
		if n == 0 || x.Runs[n-1].Raw == nil {
			continue
		}
		for _, l := range x.Runs[n-1].Raw.Latency {
			fmt.Fprintf(tw, "%s\t%s\t%d%%\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", x.Scenario, x.Target, l.Percent, l.Offered, l.Achieved, l.P50, l.P99, l.P999, l.Max)
		}
	}
	tw.Flush()
}
