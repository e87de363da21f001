package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// client talks to the management API.
type client struct {
	base, user, pass string
	token            string // OAuth 2 access token: sent as Bearer instead of user and password
	http             *http.Client
}

// authorize sets the request's credentials.
func (c *client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
		return
	}
	req.SetBasicAuth(c.user, c.pass)
}

// apiError is an error answer of the API.
type apiError struct {
	Status int
	Error_ string `json:"error"`
	Reason any    `json:"reason"`
}

func (e *apiError) Error() string {
	if e.Error_ == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s: %v", e.Status, e.Error_, e.Reason)
}

// do sends a request; body is JSON-encoded unless it is a []byte. hdr
// holds extra header pairs.
func (c *client) do(method, path string, body any, hdr ...string) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		if b, ok := body.([]byte); ok {
			rd = bytes.NewReader(b)
		} else {
			b, err := json.Marshal(body)
			if err != nil {
				return nil, err
			}
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	c.authorize(req)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxAnswer {
		return nil, fmt.Errorf("%s %s: answer larger than %d MiB", method, path, maxAnswer>>20)
	}
	if resp.StatusCode >= 400 {
		e := &apiError{Status: resp.StatusCode}
		_ = json.Unmarshal(data, e)
		return nil, e
	}
	return data, nil
}

// maxAnswer bounds what tridentctl reads of one API answer.
const maxAnswer = 256 << 20

func esc(s string) string { return url.PathEscape(s) }

// object names what a request is about, for errors: "queue 'q' in vhost
// '/'", "user 'ann'".
type object struct {
	kind, name string
	vhost      string // "" for objects outside vhosts
}

func (o object) String() string {
	s := fmt.Sprintf("%s '%s'", o.kind, o.name)
	if o.vhost != "" {
		s += fmt.Sprintf(" in vhost '%s'", o.vhost)
	}
	return s
}

// call is do for a request about obj: a 404 (or the publish endpoint's
// 400 "404 NOT_FOUND - ...") becomes "<obj> not found", or "vhost 'v' not
// found" when the vhost is what is missing; any other
// refusal "<obj>: HTTP <code>: <error>: <reason>".
func (cmd *command) call(obj object, method, path string, body any, hdr ...string) ([]byte, error) {
	data, err := cmd.c.do(method, path, body, hdr...)
	var ae *apiError
	if err == nil || !errors.As(err, &ae) {
		return data, err
	}
	reason, _ := ae.Reason.(string)
	if ae.Status == http.StatusNotFound || strings.HasPrefix(reason, "404 NOT_FOUND") {
		if obj.vhost != "" && !cmd.vhostExists(obj.vhost) {
			return nil, fmt.Errorf("vhost '%s' not found", obj.vhost)
		}
		return nil, fmt.Errorf("%s not found", obj)
	}
	return nil, fmt.Errorf("%s: %w", obj, err)
}

// vhostExists reports whether vhost is known; true when the API cannot
// tell (so the error names the object asked for).
func (cmd *command) vhostExists(vhost string) bool {
	_, err := cmd.c.do("GET", "/api/vhosts/"+esc(vhost), nil)
	var ae *apiError
	return !(errors.As(err, &ae) && ae.Status == http.StatusNotFound)
}

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

func declareForms() []form {
	vp := func(c *command) string { return "/" + esc(c.vhost()) + "/" }
	return []form{
		{kind: "queue", usage: "declare queue NAME [--durable=false] [--auto-delete] [--arg k=v ...]", setup: func(c *command, o *opts) func() error {
			durable := o.fs.Bool("durable", true, "survive a restart")
			autoDelete := o.fs.Bool("auto-delete", false, "delete once its last consumer goes")
			args := kvList{}
			o.fs.Var(args, "arg", "an argument `k=v`, e.g. x-queue-type=quorum (repeatable)")
			return func() error {
				if err := o.need(1, 1, "the queue's NAME"); err != nil {
					return err
				}
				q := object{kind: "queue", name: o.args[0], vhost: c.vhost()}
				_, err := c.call(q, "PUT", "/api/queues"+vp(c)+esc(o.args[0]),
					map[string]any{"durable": *durable, "auto_delete": *autoDelete, "arguments": map[string]any(args)})
				return c.done(err, q.String()+" declared")
			}
		}},
		{kind: "exchange", usage: "declare exchange NAME [--type direct|fanout|topic|headers|...] [--durable=false] [--auto-delete] [--internal] [--arg k=v ...]", setup: func(c *command, o *opts) func() error {
			typ := o.fs.String("type", "direct", "the exchange `TYPE`")
			durable := o.fs.Bool("durable", true, "survive a restart")
			autoDelete := o.fs.Bool("auto-delete", false, "delete once its last binding goes")
			internal := o.fs.Bool("internal", false, "refuse publishes from clients")
			args := kvList{}
			o.fs.Var(args, "arg", "an argument `k=v`, e.g. alternate-exchange=ae (repeatable)")
			return func() error {
				if err := o.need(1, 1, "the exchange's NAME"); err != nil {
					return err
				}
				x := object{kind: "exchange", name: o.args[0], vhost: c.vhost()}
				_, err := c.call(x, "PUT", "/api/exchanges"+vp(c)+esc(o.args[0]), map[string]any{"type": *typ,
					"durable": *durable, "auto_delete": *autoDelete, "internal": *internal, "arguments": map[string]any(args)})
				return c.done(err, x.String()+" declared")
			}
		}},
		{kind: "binding", usage: "declare binding --source X --destination D [--destination-type queue|exchange] [--routing-key K] [--arg k=v ...]", setup: func(c *command, o *opts) func() error {
			src := o.fs.String("source", "", "the source exchange `X`")
			dst := o.fs.String("destination", "", "the destination queue or exchange `D`")
			dt := o.fs.String("destination-type", "queue", "`TYPE`: queue or exchange")
			rk := o.fs.String("routing-key", "", "the binding `KEY`")
			args := kvList{}
			o.fs.Var(args, "arg", "an argument `k=v` (repeatable)")
			return func() error {
				if *src == "" || *dst == "" || len(o.args) > 0 {
					return usageError("declare binding needs --source and --destination (and no positional argument)")
				}
				_, err := c.call(bindingObject(c, *src, *dt, *dst), "POST", "/api/bindings"+vp(c)+"e/"+esc(*src)+"/"+dtype(*dt)+"/"+esc(*dst),
					map[string]any{"routing_key": *rk, "arguments": map[string]any(args)})
				return c.done(err, "binding declared")
			}
		}},
		{kind: "user", usage: "declare user NAME [--password P | --password-hash H] [--tags a,b]", setup: func(c *command, o *opts) func() error {
			pw := o.fs.String("password", "", "the user's `PASSWORD`")
			hash := o.fs.String("password-hash", "", "the password `HASH` (RabbitMQ's format) instead")
			tags := o.fs.String("tags", "", "comma-separated `TAGS`: administrator, monitoring, policymaker, management")
			return func() error {
				if err := o.need(1, 1, "the user's NAME"); err != nil {
					return err
				}
				body := map[string]any{"tags": *tags}
				if *hash != "" {
					body["password_hash"] = *hash
				} else {
					body["password"] = *pw
				}
				u := object{kind: "user", name: o.args[0]}
				_, err := c.call(u, "PUT", "/api/users/"+esc(o.args[0]), body)
				return c.done(err, u.String()+" declared")
			}
		}},
		{kind: "vhost", usage: "declare vhost NAME [--description TEXT] [--tags a,b]", setup: func(c *command, o *opts) func() error {
			desc := o.fs.String("description", "", "`TEXT`: what the vhost is for")
			tags := o.fs.String("tags", "", "comma-separated `TAGS`")
			return func() error {
				if err := o.need(1, 1, "the vhost's NAME"); err != nil {
					return err
				}
				body := map[string]any{}
				if *desc != "" {
					body["description"] = *desc
				}
				if *tags != "" {
					body["tags"] = *tags
				}
				v := object{kind: "vhost", name: o.args[0]}
				_, err := c.call(v, "PUT", "/api/vhosts/"+esc(o.args[0]), body)
				return c.done(err, v.String()+" declared")
			}
		}},
		{kind: "permission", usage: "declare permission --user U [--configure RE] [--write RE] [--read RE]", about: "Sets the user's permissions in --vhost.", setup: func(c *command, o *opts) func() error {
			u := o.fs.String("user", "", "the `USER` given the permissions")
			conf := o.fs.String("configure", ".*", "configure permission, a regular expression `RE`")
			wr := o.fs.String("write", ".*", "write permission, a regular expression `RE`")
			rd := o.fs.String("read", ".*", "read permission, a regular expression `RE`")
			return func() error {
				if *u == "" || len(o.args) > 0 {
					return usageError("declare permission needs --user (and no positional argument)")
				}
				p := object{kind: "permission of user", name: *u, vhost: c.vhost()}
				_, err := c.call(p, "PUT", "/api/permissions/"+esc(c.vhost())+"/"+esc(*u),
					map[string]any{"configure": *conf, "write": *wr, "read": *rd})
				return c.done(err, "permissions of user '"+*u+"' in vhost '"+c.vhost()+"' declared")
			}
		}},
		superStreamDeclareForm(),
		shovelKind.declareForm(), bridgeKind.declareForm(),
	}
}

func bindingObject(c *command, src, dt, dst string) object {
	d := "queue"
	if dtype(dt) == "e" {
		d = "exchange"
	}
	return object{kind: "binding from exchange", name: src + "' to " + d + " '" + dst, vhost: c.vhost()}
}

func dtype(t string) string {
	if t == "exchange" || t == "e" {
		return "e"
	}
	return "q"
}

func deleteForms() []form {
	vp := func(c *command) string { return "/" + esc(c.vhost()) + "/" }
	named := func(kind string) form {
		usage := "delete " + kind + " NAME"
		if kind == "queue" {
			usage += " [--if-unused] [--if-empty]"
		}
		if kind == "exchange" {
			usage += " [--if-unused]"
		}
		return form{kind: kind, usage: usage, setup: func(c *command, o *opts) func() error {
			var ifUnused, ifEmpty *bool
			if kind == "queue" || kind == "exchange" {
				ifUnused = o.fs.Bool("if-unused", false, "only if it has no consumers (a queue) or bindings (an exchange)")
			}
			if kind == "queue" {
				ifEmpty = o.fs.Bool("if-empty", false, "only if it holds no messages")
			}
			return func() error {
				if err := o.need(1, 1, "the "+kind+"'s NAME"); err != nil {
					return err
				}
				name := o.args[0]
				obj := object{kind: kind, name: name}
				var path string
				switch kind {
				case "queue":
					path, obj.vhost = "/api/queues"+vp(c)+esc(name), c.vhost()
				case "exchange":
					path, obj.vhost = "/api/exchanges"+vp(c)+esc(name), c.vhost()
				case "user":
					path = "/api/users/" + esc(name)
				case "vhost":
					path = "/api/vhosts/" + esc(name)
				}
				q := url.Values{}
				if ifUnused != nil && *ifUnused {
					q.Set("if-unused", "true")
				}
				if ifEmpty != nil && *ifEmpty {
					q.Set("if-empty", "true")
				}
				if len(q) > 0 {
					path += "?" + q.Encode()
				}
				_, err := c.call(obj, "DELETE", path, nil)
				return c.done(err, obj.String()+" deleted")
			}
		}}
	}
	return []form{
		named("queue"), named("exchange"),
		{kind: "binding", usage: "delete binding --source X --destination D [--destination-type queue|exchange] [--properties-key K]", setup: func(c *command, o *opts) func() error {
			src := o.fs.String("source", "", "the source exchange `X`")
			dst := o.fs.String("destination", "", "the destination queue or exchange `D`")
			dt := o.fs.String("destination-type", "queue", "`TYPE`: queue or exchange")
			pk := o.fs.String("properties-key", "", "the binding's properties key `K` (see list bindings; default: the empty routing key)")
			return func() error {
				if *src == "" || *dst == "" || len(o.args) > 0 {
					return usageError("delete binding needs --source and --destination (and no positional argument)")
				}
				key := *pk
				if key == "" {
					key = "~"
				}
				_, err := c.call(bindingObject(c, *src, *dt, *dst), "DELETE",
					"/api/bindings"+vp(c)+"e/"+esc(*src)+"/"+dtype(*dt)+"/"+esc(*dst)+"/"+esc(key), nil)
				return c.done(err, "binding deleted")
			}
		}},
		named("user"), named("vhost"),
		{kind: "permission", usage: "delete permission --user U", about: "Removes the user's permissions in --vhost.", setup: func(c *command, o *opts) func() error {
			u := o.fs.String("user", "", "the `USER` whose permissions go")
			return func() error {
				if *u == "" || len(o.args) > 0 {
					return usageError("delete permission needs --user (and no positional argument)")
				}
				p := object{kind: "permission of user", name: *u, vhost: c.vhost()}
				_, err := c.call(p, "DELETE", "/api/permissions/"+esc(c.vhost())+"/"+esc(*u), nil)
				return c.done(err, "permissions of user '"+*u+"' in vhost '"+c.vhost()+"' deleted")
			}
		}},
		superStreamDeleteForm(),
		shovelKind.deleteForm(), bridgeKind.deleteForm(),
	}
}

// maxStdinBody bounds a message body read from standard input (the API
// takes bodies of at most 1 MiB besides definitions).
const maxStdinBody = 1 << 20

func publishForm(c *command, o *opts) func() error {
	x := o.fs.String("exchange", "", "publish through exchange `X` (default: the default exchange, which routes to the queue named ROUTING_KEY)")
	rk := o.fs.String("routing-key", "", "the routing `KEY` (instead of the ROUTING_KEY argument)")
	payload := o.fs.String("payload", "", "the `BODY` (instead of the BODY argument)")
	ct := o.fs.String("content-type", "", "the content_type property (`TYPE`, e.g. text/plain)")
	persistent := o.fs.Bool("persistent", false, "delivery_mode 2 (persistent)")
	headers := kvList{}
	o.fs.Var(headers, "header", "a header `k=v` (repeatable)")
	return func() error {
		key, body := *rk, []byte(*payload)
		haveBody := *payload != ""
		args := o.args
		if key == "" {
			if len(args) == 0 {
				return usageError("publish needs a ROUTING_KEY (a queue's name with the default exchange)")
			}
			key, args = args[0], args[1:]
		}
		switch {
		case len(args) > 1:
			return usageError("publish takes one BODY (quote it)")
		case len(args) == 1 && haveBody:
			return usageError("publish takes BODY or --payload, not both")
		case len(args) == 1:
			body = []byte(args[0])
		case !haveBody:
			b, err := io.ReadAll(io.LimitReader(c.stdin, maxStdinBody+1))
			if err != nil {
				return fmt.Errorf("reading the body from standard input: %w", err)
			}
			if len(b) > maxStdinBody {
				return fmt.Errorf("the body on standard input is larger than %d MiB", maxStdinBody>>20)
			}
			body = b
		}
		xname := *x
		if xname == "" {
			xname = "amq.default"
		}
		props := map[string]any{}
		if *ct != "" {
			props["content_type"] = *ct
		}
		if *persistent {
			props["delivery_mode"] = 2
		}
		if len(headers) > 0 {
			props["headers"] = map[string]any(headers)
		}
		enc, pl := "string", string(body)
		if !utf8.Valid(body) {
			enc, pl = "base64", base64.StdEncoding.EncodeToString(body)
		}
		xo := object{kind: "exchange", name: *x, vhost: c.vhost()}
		if *x == "" {
			xo.kind, xo.name = "default exchange", ""
		}
		data, err := c.call(xo, "POST", "/api/exchanges/"+esc(c.vhost())+"/"+esc(xname)+"/publish",
			map[string]any{"routing_key": key, "payload": pl, "payload_encoding": enc, "properties": props})
		if err != nil {
			return err
		}
		var res struct {
			Routed bool `json:"routed"`
		}
		if err := json.Unmarshal(data, &res); err != nil {
			return err
		}
		if c.o.format == "json" {
			return c.o.json(res)
		}
		via := "the default exchange"
		if *x != "" {
			via = "exchange '" + *x + "'"
		}
		if res.Routed {
			fmt.Fprintf(c.o.w, "message published through %s with routing key '%s' in vhost '%s': routed\n", via, key, c.vhost())
		} else {
			fmt.Fprintf(c.o.w, "message published through %s with routing key '%s' in vhost '%s' but NOT routed: no queue matches\n", via, key, c.vhost())
		}
		return nil
	}
}

func getForm(c *command, o *opts) func() error {
	q := o.fs.String("queue", "", "the `QUEUE` (instead of the argument)")
	count := o.fs.Int("count", 1, "how many messages (`N`)")
	ackmode := o.fs.String("ackmode", "ack_requeue_true", "`MODE`: ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false")
	return func() error {
		if *q == "" && len(o.args) == 1 {
			*q = o.args[0]
		}
		if *q == "" || len(o.args) > 1 || (len(o.args) == 1 && o.args[0] != *q) {
			return usageError("get takes one QUEUE")
		}
		qo := object{kind: "queue", name: *q, vhost: c.vhost()}
		data, err := c.call(qo, "POST", "/api/queues/"+esc(c.vhost())+"/"+esc(*q)+"/get",
			map[string]any{"count": *count, "ackmode": *ackmode, "encoding": "auto"})
		if err != nil {
			return err
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
		return c.o.render(v, []string{"routing_key", "exchange", "message_count", "payload", "payload_bytes", "payload_encoding", "redelivered"})
	}
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

// --- output ---

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
