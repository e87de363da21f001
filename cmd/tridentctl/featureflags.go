package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Feature flags, as rabbitmqctl list_feature_flags / enable_feature_flag:
// "feature-flags list" and "feature-flags enable NAME".

func (cmd *command) featureFlagsList(o *opts) error {
	if err := o.need(0, 0, "no argument after feature-flags list"); err != nil {
		return err
	}
	data, err := cmd.call(object{kind: "list", name: "feature-flags"}, "GET", "/api/feature-flags", nil)
	if err != nil {
		return err
	}
	var rows []map[string]any
	if err := json.Unmarshal(data, &rows); err != nil {
		return err
	}
	out := make([]any, len(rows))
	for i, r := range rows {
		if m, ok := r["missing_on"].([]any); ok {
			parts := make([]string, len(m))
			for j, x := range m {
				parts[j] = fmt.Sprint(x)
			}
			r["missing_on"] = strings.Join(parts, ", ")
		}
		out[i] = r
	}
	return cmd.o.render(out, []string{"name", "state", "stability", "release", "missing_on", "desc"})
}

func (cmd *command) featureFlagsEnable(o *opts) error {
	if err := o.need(1, 1, "the NAME of the feature flag to enable"); err != nil {
		return err
	}
	ff := object{kind: "feature flag", name: o.args[0]}
	_, err := cmd.call(ff, "PUT", "/api/feature-flags/"+esc(o.args[0])+"/enable", map[string]any{})
	return cmd.done(err, ff.String()+" enabled")
}
