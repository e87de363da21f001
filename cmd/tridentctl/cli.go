package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// kinds maps a list KIND to its path and table columns.
var kinds = map[string]struct {
	path    string
	perVH   bool
	columns []string
}{
	"queues":       {"/api/queues", true, []string{"vhost", "name", "type", "durable", "auto_delete", "messages_ready", "messages_unacknowledged", "consumers"}},
	"exchanges":    {"/api/exchanges", true, []string{"vhost", "name", "type", "durable", "auto_delete", "internal"}},
	"bindings":     {"/api/bindings", true, []string{"vhost", "source", "destination", "destination_type", "routing_key", "properties_key"}},
	"connections":  {"/api/connections", false, []string{"name", "user", "vhost", "protocol", "channels", "peer_host", "peer_port"}},
	"channels":     {"/api/channels", false, []string{"name", "user", "vhost", "number", "message_stats.publish_details.rate", "message_stats.deliver_get_details.rate", "message_stats.ack_details.rate"}},
	"consumers":    {"/api/consumers", true, []string{"queue.vhost", "queue.name", "consumer_tag", "ack_required", "prefetch_count"}},
	"users":        {"/api/users", false, []string{"name", "tags"}},
	"vhosts":       {"/api/vhosts", false, []string{"name", "messages", "messages_ready", "messages_unacknowledged"}},
	"permissions":  {"/api/permissions", false, []string{"user", "vhost", "configure", "write", "read"}},
	"policies":     {"/api/policies", true, []string{"vhost", "name", "pattern", "apply-to", "priority", "definition"}},
	"shovels":      {"/api/shovels", true, []string{"vhost", "name", "type", "state", "reason", "node"}},
	"mqtt-bridges": {"/api/mqtt/bridges", true, []string{"vhost", "name", "type", "state", "reason", "address", "messages_in", "messages_out", "node"}},
}

func kindNames() []string {
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

type usageError string

func (u usageError) Error() string { return string(u) }

// command is one run of tridentctl: the parsed global flags and where
// it writes.
type command struct {
	g      *globals
	c      *client
	o      *out
	stdin  io.Reader
	stderr io.Writer
}

func (cmd *command) vhost() string { return cmd.g.vhost }

// opts parses a command's flags and positional arguments in any order;
// after "--" everything is positional.
type opts struct {
	fs   *flag.FlagSet
	args []string
}

func newOpts(name string) *opts {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &opts{fs: fs}
}

func (o *opts) parse(args []string) error {
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := o.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError(err.Error())
		}
		if o.fs.NArg() == 0 {
			break
		}
		o.args = append(o.args, o.fs.Arg(0))
		args = o.fs.Args()[1:]
	}
	o.args = append(o.args, tail...)
	return nil
}

// need checks the number of positional arguments.
func (o *opts) need(min, max int, what string) error {
	if len(o.args) < min || len(o.args) > max {
		return usageError("expected " + what)
	}
	return nil
}

type kvList map[string]any

func (k kvList) String() string { return "" }
func (k kvList) Set(s string) error {
	key, val, ok := strings.Cut(s, "=")
	if !ok {
		return errors.New("want key=value")
	}
	if n, err := strconv.ParseInt(val, 10, 64); err == nil {
		k[key] = n
	} else if val == "true" || val == "false" {
		k[key] = val == "true"
	} else {
		k[key] = val
	}
	return nil
}

// commandTable lists every command; help prints them in this order.
func commandTable() []cmdDef {
	return []cmdDef{
		{name: "overview", summary: "the node's overview: versions, cluster name, totals, rates, listeners",
			forms: []form{{usage: "overview", setup: func(c *command, o *opts) func() error {
				return func() error {
					if err := o.need(0, 0, "no arguments"); err != nil {
						return err
					}
					return c.get(object{kind: "overview", name: "/api/overview"}, "/api/overview", nil)
				}
			}}}},
		{name: "list", args: "KIND", summary: "list objects: " + strings.Join(kindNames(), ", "),
			forms: []form{{usage: "list KIND [--all-vhosts]",
				about: "KIND is one of " + strings.Join(kindNames(), ", ") + ".\nObjects of a vhost are listed for --vhost, or for every vhost with --all-vhosts.",
				setup: func(c *command, o *opts) func() error { return func() error { return c.list(o) } }}}},
		{name: "declare", args: "KIND NAME", summary: "declare a queue, exchange, binding, user, vhost, permission, super stream, shovel or MQTT bridge",
			forms: declareForms()},
		{name: "delete", args: "KIND NAME", summary: "delete a queue, exchange, binding, user, vhost, permission, super stream, shovel or MQTT bridge",
			forms: deleteForms()},
		{name: "restart", args: "shovel|mqtt-bridge NAME", summary: "restart a shovel or an MQTT bridge (as rabbitmqctl restart_shovel)",
			forms: []form{shovelKind.restartForm(), bridgeKind.restartForm()}},
		{name: "purge", args: "queue NAME", summary: "remove every ready message of a queue",
			forms: []form{{kind: "queue", usage: "purge queue NAME", setup: func(c *command, o *opts) func() error {
				return func() error {
					if err := o.need(1, 1, "the queue's NAME"); err != nil {
						return err
					}
					q := object{kind: "queue", name: o.args[0], vhost: c.vhost()}
					_, err := c.call(q, "DELETE", "/api/queues/"+esc(c.vhost())+"/"+esc(o.args[0])+"/contents", nil)
					return c.done(err, q.String()+" purged")
				}
			}}}},
		{name: "close", args: "connection NAME", summary: "close a client connection (AMQP clients get 320 CONNECTION_FORCED)",
			forms: []form{{kind: "connection", usage: "close connection NAME [--reason TEXT]", setup: func(c *command, o *opts) func() error {
				reason := o.fs.String("reason", "Closed via tridentctl", "the `TEXT` the client is given")
				return func() error {
					if err := o.need(1, 1, "the connection's NAME (see list connections)"); err != nil {
						return err
					}
					conn := object{kind: "connection", name: o.args[0]}
					_, err := c.call(conn, "DELETE", "/api/connections/"+esc(o.args[0]), nil, "X-Reason", *reason)
					return c.done(err, conn.String()+" closed")
				}
			}}}},
		{name: "publish", args: "ROUTING_KEY [BODY]", summary: "publish a message (BODY, or standard input) and say whether it was routed",
			forms: []form{{usage: "publish ROUTING_KEY [BODY] [--exchange X] [--content-type T] [--persistent] [--header k=v]",
				about: "Publishes BODY, or standard input when BODY is absent, through the default exchange\n" +
					"(ROUTING_KEY is then a queue name) or through --exchange. Says whether the message was\n" +
					"routed to a queue (JSON: {\"routed\": true|false}). BODY that is not UTF-8 is sent base64-encoded.",
				setup: publishForm}}},
		{name: "get", args: "QUEUE", summary: "fetch messages from a queue (requeued by default)",
			forms: []form{{usage: "get QUEUE [--count N] [--ackmode MODE]", setup: getForm}}},
		{name: "export", args: "FILE", summary: "write the definitions (RabbitMQ's JSON) to FILE, - for standard output",
			forms: []form{{usage: "export FILE", setup: func(c *command, o *opts) func() error {
				return func() error { return c.export(o) }
			}}}},
		{name: "import", args: "FILE", summary: "load definitions from FILE, - for standard input",
			forms: []form{{usage: "import FILE", setup: func(c *command, o *opts) func() error {
				return func() error { return c.importDefs(o) }
			}}}},
		{name: "cluster-name", args: "[NAME]", summary: "show the cluster's name, or set it (administrators)",
			forms: []form{{usage: "cluster-name [NAME]", setup: func(c *command, o *opts) func() error {
				return func() error { return c.clusterName(o) }
			}}}},
		{name: "forget_cluster_node", args: "NODE", summary: "remove a stopped node from the cluster",
			forms: []form{{usage: "forget_cluster_node NODE", about: "The node must be stopped.",
				setup: func(c *command, o *opts) func() error { return func() error { return c.forget(o) } }}}},
		{name: "rebalance", args: "quorum", summary: "spread quorum queue leaders over the nodes",
			forms: []form{{kind: "quorum", usage: "rebalance quorum", setup: func(c *command, o *opts) func() error {
				return func() error { return c.rebalance(o) }
			}}, {kind: "all", usage: "rebalance all", about: "The same as rebalance quorum.", setup: func(c *command, o *opts) func() error {
				return func() error { return c.rebalance(o) }
			}}}},
		{name: "feature-flags", args: "list|enable NAME", summary: "list the cluster's feature flags, or enable one on every node",
			forms: []form{{kind: "list", usage: "feature-flags list", setup: func(c *command, o *opts) func() error {
				return func() error { return c.featureFlagsList(o) }
			}}, {kind: "enable", usage: "feature-flags enable NAME", about: "Refused while a node does not support the flag (an older release, or stopped).",
				setup: func(c *command, o *opts) func() error { return func() error { return c.featureFlagsEnable(o) } }}}},
		{name: "drain", args: "[NODE]", summary: "put a node into maintenance mode (as rabbitmq-upgrade drain)",
			forms: []form{{usage: "drain [NODE]", about: "The node stops accepting client connections (AMQP, MQTT, STOMP and their TLS and\n" +
				"WebSocket listeners; its HTTP API and cluster ports stay up), closes those it has (AMQP: 320\n" +
				"CONNECTION_FORCED) and hands every quorum queue, stream and metadata leadership it holds to\n" +
				"another node. It stays drained across a restart until revive. NODE defaults to the node\n" +
				"--url points at; another node's drain must be sent to that node's own --url.",
				setup: func(c *command, o *opts) func() error { return func() error { return c.maintenance(o, "drain") } }}}},
		{name: "revive", args: "[NODE]", summary: "take a node out of maintenance mode (as rabbitmq-upgrade revive)",
			forms: []form{{usage: "revive [NODE]", about: "The node accepts client connections again. Leaderships come back by elections or\n" +
				"\"tridentctl rebalance quorum\". NODE defaults to the node --url points at.",
				setup: func(c *command, o *opts) func() error { return func() error { return c.maintenance(o, "revive") } }}}},
		{name: "check", args: "quorum-critical", summary: "fail if stopping this node would cost a quorum queue its majority",
			forms: []form{{kind: "quorum-critical", usage: "check quorum-critical", setup: func(c *command, o *opts) func() error {
				return func() error { return c.checkQuorumCritical(o) }
			}}}},
	}
}

func (cmd *command) done(err error, msg string) error {
	if err != nil {
		return err
	}
	if cmd.o.format == "json" {
		return cmd.o.json(map[string]any{"result": "ok", "message": msg})
	}
	fmt.Fprintln(cmd.o.w, msg)
	return nil
}

func (cmd *command) get(obj object, path string, cols []string) error {
	data, err := cmd.call(obj, "GET", path, nil)
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	return cmd.o.render(v, cols)
}

func (cmd *command) list(o *opts) error {
	if len(o.args) != 1 {
		return usageError("list what? one of " + strings.Join(kindNames(), ", "))
	}
	kind := o.args[0]
	k, ok := kinds[kind]
	if !ok {
		return usageError(fmt.Sprintf("list what? %q is not one of %s", kind, strings.Join(kindNames(), ", ")))
	}
	path := k.path
	obj := object{kind: "list", name: kind}
	if k.perVH && !cmd.g.all {
		path += "/" + esc(cmd.vhost())
		obj = object{kind: "vhost", name: cmd.vhost()}
	}
	return cmd.get(obj, path, k.columns)
}

func (cmd *command) export(o *opts) error {
	if err := o.need(1, 1, "FILE (- for standard output)"); err != nil {
		return err
	}
	data, err := cmd.call(object{kind: "definitions", name: "/api/definitions"}, "GET", "/api/definitions", nil)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	if o.args[0] == "-" {
		_, err = cmd.o.w.Write(buf.Bytes())
		return err
	}
	if err := os.WriteFile(o.args[0], buf.Bytes(), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(cmd.o.w, "definitions exported to %s\n", o.args[0])
	return nil
}

func (cmd *command) importDefs(o *opts) error {
	if err := o.need(1, 1, "FILE (- for standard input)"); err != nil {
		return err
	}
	var data []byte
	var err error
	if o.args[0] == "-" {
		data, err = io.ReadAll(cmd.stdin)
	} else {
		data, err = os.ReadFile(o.args[0])
	}
	if err != nil {
		return err
	}
	_, err = cmd.call(object{kind: "definitions", name: o.args[0]}, "POST", "/api/definitions", data)
	return cmd.done(err, "definitions imported")
}

// clusterName shows or sets the cluster's name (GET/PUT /api/cluster-name).
func (cmd *command) clusterName(o *opts) error {
	if err := o.need(0, 1, "at most one NAME"); err != nil {
		return err
	}
	obj := object{kind: "cluster name", name: ""}
	if len(o.args) == 1 {
		obj.name = o.args[0]
		_, err := cmd.call(obj, "PUT", "/api/cluster-name", map[string]any{"name": o.args[0]})
		return cmd.done(err, "cluster name set to '"+o.args[0]+"'")
	}
	data, err := cmd.call(obj, "GET", "/api/cluster-name", nil)
	if err != nil {
		return err
	}
	var v struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if cmd.o.format == "json" {
		return cmd.o.json(v)
	}
	fmt.Fprintln(cmd.o.w, v.Name)
	return nil
}
