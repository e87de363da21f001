package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Super streams, as rabbitmq-streams add_super_stream / delete_super_stream,
// through the HTTP API only: a durable direct exchange with the argument
// x-super-stream true, durable streams NAME-0 … NAME-(N-1) (or NAME-KEY
// for each --routing-keys KEY), each bound with its key (its index, or
// the routing key) and the binding argument x-stream-partition-order.
// Each call is the API's, with its permission checks.

func superStreamDeclareForm() form {
	return form{kind: "super-stream", usage: "declare super-stream NAME (--partitions N | --routing-keys a,b,c) [--max-age 7D] [--max-length-bytes N] [--arg k=v ...]",
		about: "Declares the exchange NAME (x-super-stream), its partition streams and their bindings,\n" +
			"as rabbitmq-streams add_super_stream. --arg applies to every partition.",
		setup: func(c *command, o *opts) func() error {
			n := o.fs.Int("partitions", 0, "`N` partitions NAME-0 … NAME-(N-1), bound with their index")
			keys := o.fs.String("routing-keys", "", "comma-separated `KEYS`: one partition NAME-KEY per key, bound with it")
			maxAge := o.fs.String("max-age", "", "each partition's x-max-age, e.g. `7D`")
			maxLen := o.fs.Int64("max-length-bytes", 0, "each partition's x-max-length-bytes `N`")
			args := kvList{}
			o.fs.Var(args, "arg", "a partition argument `k=v` (repeatable)")
			return func() error {
				if err := o.need(1, 1, "the super stream's NAME"); err != nil {
					return err
				}
				if (*n > 0) == (*keys != "") {
					return usageError("declare super-stream needs --partitions N or --routing-keys a,b,c (one of them)")
				}
				name := o.args[0]
				streams, bkeys := superStreamPartitions(name, *n, *keys)
				qargs := map[string]any{"x-queue-type": "stream"}
				for k, v := range args {
					qargs[k] = v
				}
				if *maxAge != "" {
					qargs["x-max-age"] = *maxAge
				}
				if *maxLen > 0 {
					qargs["x-max-length-bytes"] = *maxLen
				}
				return c.declareSuperStream(name, streams, bkeys, qargs)
			}
		}}
}

// superStreamPartitions names the partitions and their binding keys.
func superStreamPartitions(name string, n int, keys string) (streams, bkeys []string) {
	if keys != "" {
		for _, k := range strings.Split(keys, ",") {
			if k = strings.TrimSpace(k); k != "" {
				streams, bkeys = append(streams, name+"-"+k), append(bkeys, k)
			}
		}
		return streams, bkeys
	}
	for i := range n {
		streams, bkeys = append(streams, name+"-"+strconv.Itoa(i)), append(bkeys, strconv.Itoa(i))
	}
	return streams, bkeys
}

func (cmd *command) declareSuperStream(name string, streams, bkeys []string, qargs map[string]any) error {
	vp := "/" + esc(cmd.vhost()) + "/"
	x := object{kind: "super stream", name: name, vhost: cmd.vhost()}
	// As add_super_stream: refused when the exchange or a partition exists.
	if _, err := cmd.c.do("GET", "/api/exchanges"+vp+esc(name), nil); err == nil {
		return fmt.Errorf("%s: exchange '%s' already exists", x, name)
	}
	for _, s := range streams {
		if _, err := cmd.c.do("GET", "/api/queues"+vp+esc(s), nil); err == nil {
			return fmt.Errorf("%s: stream '%s' already exists", x, s)
		}
	}
	if _, err := cmd.call(x, "PUT", "/api/exchanges"+vp+esc(name), map[string]any{"type": "direct",
		"durable": true, "auto_delete": false, "internal": false, "arguments": map[string]any{"x-super-stream": true}}); err != nil {
		return err
	}
	for _, s := range streams {
		if _, err := cmd.call(object{kind: "stream", name: s, vhost: cmd.vhost()}, "PUT", "/api/queues"+vp+esc(s),
			map[string]any{"durable": true, "auto_delete": false, "arguments": qargs}); err != nil {
			return err
		}
	}
	for i, s := range streams {
		if _, err := cmd.call(bindingObject(cmd, name, "queue", s), "POST", "/api/bindings"+vp+"e/"+esc(name)+"/q/"+esc(s),
			map[string]any{"routing_key": bkeys[i], "arguments": map[string]any{"x-stream-partition-order": i}}); err != nil {
			return err
		}
	}
	return cmd.done(nil, fmt.Sprintf("%s declared with %d partitions: %s", x, len(streams), strings.Join(streams, ", ")))
}

func superStreamDeleteForm() form {
	return form{kind: "super-stream", usage: "delete super-stream NAME",
		about: "Deletes the super stream's exchange and every stream bound to it, as rabbitmq-streams delete_super_stream.",
		setup: func(c *command, o *opts) func() error {
			return func() error {
				if err := o.need(1, 1, "the super stream's NAME"); err != nil {
					return err
				}
				return c.deleteSuperStream(o.args[0])
			}
		}}
}

func (cmd *command) deleteSuperStream(name string) error {
	vp := "/" + esc(cmd.vhost()) + "/"
	x := object{kind: "super stream", name: name, vhost: cmd.vhost()}
	data, err := cmd.call(x, "GET", "/api/exchanges"+vp+esc(name), nil)
	if err != nil {
		return err
	}
	var ex struct {
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.Unmarshal(data, &ex); err != nil {
		return err
	}
	if v := ex.Arguments["x-super-stream"]; v != true && v != "true" {
		return fmt.Errorf("%s: exchange '%s' is not a super stream (no x-super-stream argument)", x, name)
	}
	data, err = cmd.call(x, "GET", "/api/exchanges"+vp+esc(name)+"/bindings/source", nil)
	if err != nil {
		return err
	}
	var bs []struct {
		Destination     string `json:"destination"`
		DestinationType string `json:"destination_type"`
	}
	if err := json.Unmarshal(data, &bs); err != nil {
		return err
	}
	seen := map[string]bool{}
	var streams []string
	for _, b := range bs {
		if b.DestinationType == "queue" && !seen[b.Destination] {
			seen[b.Destination] = true
			streams = append(streams, b.Destination)
		}
	}
	sort.Strings(streams)
	if _, err := cmd.call(x, "DELETE", "/api/exchanges"+vp+esc(name), nil); err != nil {
		return err
	}
	for _, s := range streams {
		if _, err := cmd.call(object{kind: "stream", name: s, vhost: cmd.vhost()}, "DELETE", "/api/queues"+vp+esc(s), nil); err != nil {
			return err
		}
	}
	return cmd.done(nil, fmt.Sprintf("%s deleted with %d partitions", x, len(streams)))
}
