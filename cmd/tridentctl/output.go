package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

type out struct {
	w      io.Writer
	format string
}

func (o *out) json(v any) error {
	enc := json.NewEncoder(o.w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// render prints v as JSON, or as a table of cols (an object prints as
// key/value rows).
func (o *out) render(v any, cols []string) error {
	if o.format == "json" {
		return o.json(v)
	}
	tw := tabwriter.NewWriter(o.w, 2, 8, 2, ' ', 0)
	defer tw.Flush()
	switch t := v.(type) {
	case []any:
		if len(cols) == 0 && len(t) > 0 {
			if m, ok := t[0].(map[string]any); ok {
				for k := range m {
					cols = append(cols, k)
				}
				sort.Strings(cols)
			}
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
		for _, e := range t {
			row := make([]string, len(cols))
			for i, c := range cols {
				row[i] = cell(lookup(e, c))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\n", k, cell(t[k]))
		}
	default:
		fmt.Fprintln(tw, cell(v))
	}
	return nil
}

func lookup(v any, path string) any {
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func cell(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = cell(e)
		}
		return strings.Join(parts, ",")
	case map[string]any:
		b, _ := json.Marshal(t)
		return string(b)
	}
	return fmt.Sprint(v)
}
