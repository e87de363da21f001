package main

import (
	"bytes"
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
	"time"
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

func (c *client) do(method, path string, body any) ([]byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		if b, ok := body.([]byte); ok {
			rd = bytes.NewReader(b)
		} else {
			b, err := json.Marshal(body)
			if err != nil {
				return nil, nil, err
			}
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	c.authorize(req)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode >= 400 {
		e := &apiError{Status: resp.StatusCode}
		_ = json.Unmarshal(data, e)
		return nil, nil, e
	}
	return data, resp.Header, nil
}

func esc(s string) string { return url.PathEscape(s) }

// kinds maps a list KIND to its path and table columns.
var kinds = map[string]struct {
	path    string
	perVH   bool
	columns []string
}{
	"queues":      {"/api/queues", true, []string{"vhost", "name", "type", "durable", "auto_delete", "messages_ready", "messages_unacknowledged", "consumers"}},
	"exchanges":   {"/api/exchanges", true, []string{"vhost", "name", "type", "durable", "auto_delete", "internal"}},
	"bindings":    {"/api/bindings", true, []string{"vhost", "source", "destination", "destination_type", "routing_key", "properties_key"}},
	"connections": {"/api/connections", false, []string{"name", "user", "vhost", "protocol", "channels", "peer_host", "peer_port"}},
	"channels":    {"/api/channels", false, []string{"name", "user", "vhost", "number"}},
	"consumers":   {"/api/consumers", true, []string{"queue.vhost", "queue.name", "consumer_tag", "ack_required", "prefetch_count"}},
	"users":       {"/api/users", false, []string{"name", "tags"}},
	"vhosts":      {"/api/vhosts", false, []string{"name", "messages", "messages_ready", "messages_unacknowledged"}},
	"permissions": {"/api/permissions", false, []string{"user", "vhost", "configure", "write", "read"}},
	"policies":    {"/api/policies", true, []string{"vhost", "name", "pattern", "apply-to", "priority", "definition"}},
}

func run(args []string, stdout, stderr io.Writer, env func(string) string) int {
	gf := flag.NewFlagSet("tridentctl", flag.ContinueOnError)
	gf.SetOutput(stderr)
	base := gf.String("url", envOr(env, "TRIDENT_URL", "http://127.0.0.1:15672"), "management API base URL")
	user := gf.String("user", envOr(env, "TRIDENT_USER", "guest"), "user name")
	pass := gf.String("password", envOr(env, "TRIDENT_PASSWORD", "guest"), "password")
	token := gf.String("token", envOr(env, "TRIDENT_TOKEN", ""), "OAuth 2 access token (sent as Bearer, instead of --user and --password)")
	vhost := gf.String("vhost", envOr(env, "TRIDENT_VHOST", "/"), "virtual host")
	format := gf.String("format", "table", "output: table or json")
	allVH := gf.Bool("all-vhosts", false, "list objects of every vhost")
	if err := gf.Parse(args); err != nil {
		return 2
	}
	rest := gf.Args()
	if len(rest) == 0 || rest[0] == "help" {
		fmt.Fprintln(stderr, usage())
		if len(rest) == 0 {
			return 2
		}
		return 0
	}
	if *format != "table" && *format != "json" {
		fmt.Fprintln(stderr, "tridentctl: --format must be table or json")
		return 2
	}
	c := &client{base: strings.TrimSuffix(*base, "/"), user: *user, pass: *pass, token: *token, http: &http.Client{Timeout: 30 * time.Second}}
	o := &out{w: stdout, format: *format}
	cmd := &command{c: c, o: o, vhost: *vhost, all: *allVH, stderr: stderr}
	if err := cmd.dispatch(rest); err != nil {
		fmt.Fprintln(stderr, "tridentctl:", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError string

func (u usageError) Error() string { return string(u) }

type command struct {
	c      *client
	o      *out
	vhost  string
	all    bool
	stderr io.Writer
}

// opts parses flags and positional arguments in any order.
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
	for {
		if err := o.fs.Parse(args); err != nil {
			return usageError(err.Error())
		}
		if o.fs.NArg() == 0 {
			return nil
		}
		o.args = append(o.args, o.fs.Arg(0))
		args = o.fs.Args()[1:]
	}
}

func (o *opts) need(n int, what string) error {
	if len(o.args) != n {
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

func (cmd *command) dispatch(a []string) error {
	verb := a[0]
	kind := ""
	if len(a) > 1 {
		kind = a[1]
	}
	switch verb {
	case "overview":
		return cmd.get("/api/overview", nil)
	case "list":
		return cmd.list(kind)
	case "declare":
		return cmd.declare(kind, a[2:])
	case "delete":
		return cmd.delete(kind, a[2:])
	case "purge":
		o := newOpts("purge")
		if err := o.parse(a[2:]); err != nil {
			return err
		}
		if kind != "queue" || o.need(1, "purge queue NAME") != nil {
			return usageError("usage: purge queue NAME")
		}
		_, _, err := cmd.c.do("DELETE", "/api/queues/"+esc(cmd.vhost)+"/"+esc(o.args[0])+"/contents", nil)
		return cmd.done(err, "queue purged")
	case "close":
		o := newOpts("close")
		reason := o.fs.String("reason", "Closed via tridentctl", "")
		if err := o.parse(a[2:]); err != nil {
			return err
		}
		if kind != "connection" || o.need(1, "close connection NAME") != nil {
			return usageError("usage: close connection NAME [--reason TEXT]")
		}
		req, _ := http.NewRequest("DELETE", cmd.c.base+"/api/connections/"+esc(o.args[0]), nil)
		cmd.c.authorize(req)
		req.Header.Set("X-Reason", *reason)
		resp, err := cmd.c.http.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			return &apiError{Status: resp.StatusCode}
		}
		return cmd.done(nil, "connection closed")
	case "publish":
		return cmd.publish(a[1:])
	case "get":
		return cmd.getMessages(a[1:])
	case "export":
		return cmd.export(a[1:])
	case "import":
		return cmd.importDefs(a[1:])
	case "forget_cluster_node", "rebalance", "check":
		return cmd.cluster(verb, a[1:]) // cluster.go
	}
	return usageError("unknown command " + verb + "\n" + usage())
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

func (cmd *command) get(path string, cols []string) error {
	data, _, err := cmd.c.do("GET", path, nil)
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	return cmd.o.render(v, cols)
}

func (cmd *command) list(kind string) error {
	k, ok := kinds[kind]
	if !ok {
		names := make([]string, 0, len(kinds))
		for n := range kinds {
			names = append(names, n)
		}
		sort.Strings(names)
		return usageError("list what? one of " + strings.Join(names, ", "))
	}
	path := k.path
	if k.perVH && !cmd.all {
		path += "/" + esc(cmd.vhost)
	}
	return cmd.get(path, k.columns)
}

func (cmd *command) declare(kind string, a []string) error {
	o := newOpts("declare")
	vp := "/" + esc(cmd.vhost) + "/"
	switch kind {
	case "queue":
		durable := o.fs.Bool("durable", true, "")
		autoDelete := o.fs.Bool("auto-delete", false, "")
		args := kvList{}
		o.fs.Var(args, "arg", "")
		if err := o.parse(a); err != nil {
			return err
		}
		if err := o.need(1, "declare queue NAME"); err != nil {
			return err
		}
		_, _, err := cmd.c.do("PUT", "/api/queues"+vp+esc(o.args[0]),
			map[string]any{"durable": *durable, "auto_delete": *autoDelete, "arguments": map[string]any(args)})
		return cmd.done(err, "queue declared")
	case "exchange":
		typ := o.fs.String("type", "direct", "")
		durable := o.fs.Bool("durable", true, "")
		autoDelete := o.fs.Bool("auto-delete", false, "")
		internal := o.fs.Bool("internal", false, "")
		args := kvList{}
		o.fs.Var(args, "arg", "")
		if err := o.parse(a); err != nil {
			return err
		}
		if err := o.need(1, "declare exchange NAME"); err != nil {
			return err
		}
		_, _, err := cmd.c.do("PUT", "/api/exchanges"+vp+esc(o.args[0]), map[string]any{"type": *typ,
			"durable": *durable, "auto_delete": *autoDelete, "internal": *internal, "arguments": map[string]any(args)})
		return cmd.done(err, "exchange declared")
	case "binding":
		src := o.fs.String("source", "", "")
		dst := o.fs.String("destination", "", "")
		dt := o.fs.String("destination-type", "queue", "")
		rk := o.fs.String("routing-key", "", "")
		args := kvList{}
		o.fs.Var(args, "arg", "")
		if err := o.parse(a); err != nil {
			return err
		}
		if *src == "" || *dst == "" {
			return usageError("declare binding needs --source and --destination")
		}
		_, _, err := cmd.c.do("POST", "/api/bindings"+vp+"e/"+esc(*src)+"/"+dtype(*dt)+"/"+esc(*dst),
			map[string]any{"routing_key": *rk, "arguments": map[string]any(args)})
		return cmd.done(err, "binding declared")
	case "user":
		pw := o.fs.String("password", "", "")
		hash := o.fs.String("password-hash", "", "")
		tags := o.fs.String("tags", "", "")
		if err := o.parse(a); err != nil {
			return err
		}
		if err := o.need(1, "declare user NAME"); err != nil {
			return err
		}
		body := map[string]any{"tags": *tags}
		if *hash != "" {
			body["password_hash"] = *hash
		} else {
			body["password"] = *pw
		}
		_, _, err := cmd.c.do("PUT", "/api/users/"+esc(o.args[0]), body)
		return cmd.done(err, "user declared")
	case "vhost":
		if err := o.parse(a); err != nil {
			return err
		}
		if err := o.need(1, "declare vhost NAME"); err != nil {
			return err
		}
		_, _, err := cmd.c.do("PUT", "/api/vhosts/"+esc(o.args[0]), map[string]any{})
		return cmd.done(err, "vhost declared")
	case "permission":
		u := o.fs.String("user", "", "")
		conf := o.fs.String("configure", ".*", "")
		wr := o.fs.String("write", ".*", "")
		rd := o.fs.String("read", ".*", "")
		if err := o.parse(a); err != nil {
			return err
		}
		if *u == "" {
			return usageError("declare permission needs --user")
		}
		_, _, err := cmd.c.do("PUT", "/api/permissions/"+esc(cmd.vhost)+"/"+esc(*u),
			map[string]any{"configure": *conf, "write": *wr, "read": *rd})
		return cmd.done(err, "permission declared")
	}
	return usageError("declare what? queue, exchange, binding, user, vhost or permission")
}

func dtype(t string) string {
	if t == "exchange" || t == "e" {
		return "e"
	}
	return "q"
}

func (cmd *command) delete(kind string, a []string) error {
	o := newOpts("delete")
	vp := "/" + esc(cmd.vhost) + "/"
	var path string
	switch kind {
	case "binding":
		src := o.fs.String("source", "", "")
		dst := o.fs.String("destination", "", "")
		dt := o.fs.String("destination-type", "queue", "")
		pk := o.fs.String("properties-key", "", "")
		if err := o.parse(a); err != nil {
			return err
		}
		if *src == "" || *dst == "" {
			return usageError("delete binding needs --source, --destination and --properties-key")
		}
		key := *pk
		if key == "" {
			key = "~"
		}
		path = "/api/bindings" + vp + "e/" + esc(*src) + "/" + dtype(*dt) + "/" + esc(*dst) + "/" + esc(key)
	case "permission":
		u := o.fs.String("user", "", "")
		if err := o.parse(a); err != nil {
			return err
		}
		path = "/api/permissions/" + esc(cmd.vhost) + "/" + esc(*u)
	case "queue", "exchange", "user", "vhost":
		ifUnused := o.fs.Bool("if-unused", false, "")
		ifEmpty := o.fs.Bool("if-empty", false, "")
		if err := o.parse(a); err != nil {
			return err
		}
		if err := o.need(1, "delete "+kind+" NAME"); err != nil {
			return err
		}
		name := esc(o.args[0])
		switch kind {
		case "queue":
			path = "/api/queues" + vp + name
		case "exchange":
			path = "/api/exchanges" + vp + name
		case "user":
			path = "/api/users/" + name
		case "vhost":
			path = "/api/vhosts/" + name
		}
		q := url.Values{}
		if *ifUnused {
			q.Set("if-unused", "true")
		}
		if *ifEmpty {
			q.Set("if-empty", "true")
		}
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
	default:
		return usageError("delete what? queue, exchange, binding, user, vhost or permission")
	}
	_, _, err := cmd.c.do("DELETE", path, nil)
	return cmd.done(err, kind+" deleted")
}

func (cmd *command) publish(a []string) error {
	o := newOpts("publish")
	x := o.fs.String("exchange", "amq.default", "")
	rk := o.fs.String("routing-key", "", "")
	payload := o.fs.String("payload", "", "")
	ct := o.fs.String("content-type", "", "")
	persistent := o.fs.Bool("persistent", false, "")
	if err := o.parse(a); err != nil {
		return err
	}
	if *x == "" {
		*x = "amq.default"
	}
	props := map[string]any{}
	if *ct != "" {
		props["content_type"] = *ct
	}
	if *persistent {
		props["delivery_mode"] = 2
	}
	data, _, err := cmd.c.do("POST", "/api/exchanges/"+esc(cmd.vhost)+"/"+esc(*x)+"/publish",
		map[string]any{"routing_key": *rk, "payload": *payload, "payload_encoding": "string", "properties": props})
	if err != nil {
		return err
	}
	var res struct {
		Routed bool `json:"routed"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		return err
	}
	if cmd.o.format == "json" {
		return cmd.o.json(res)
	}
	if res.Routed {
		fmt.Fprintln(cmd.o.w, "message published")
	} else {
		fmt.Fprintln(cmd.o.w, "message published but NOT routed")
	}
	return nil
}

func (cmd *command) getMessages(a []string) error {
	o := newOpts("get")
	q := o.fs.String("queue", "", "")
	count := o.fs.Int("count", 1, "")
	ackmode := o.fs.String("ackmode", "ack_requeue_true", "")
	if err := o.parse(a); err != nil {
		return err
	}
	if *q == "" && len(o.args) == 1 {
		*q = o.args[0]
	}
	if *q == "" {
		return usageError("get needs --queue")
	}
	data, _, err := cmd.c.do("POST", "/api/queues/"+esc(cmd.vhost)+"/"+esc(*q)+"/get",
		map[string]any{"count": *count, "ackmode": *ackmode, "encoding": "auto"})
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	return cmd.o.render(v, []string{"routing_key", "exchange", "message_count", "payload", "payload_bytes", "payload_encoding", "redelivered"})
}

func (cmd *command) export(a []string) error {
	if len(a) != 1 {
		return usageError("usage: export FILE")
	}
	data, _, err := cmd.c.do("GET", "/api/definitions", nil)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	if a[0] == "-" {
		_, err = cmd.o.w.Write(buf.Bytes())
		return err
	}
	if err := os.WriteFile(a[0], buf.Bytes(), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(cmd.o.w, "definitions exported to %s\n", a[0])
	return nil
}

func (cmd *command) importDefs(a []string) error {
	if len(a) != 1 {
		return usageError("usage: import FILE")
	}
	var data []byte
	var err error
	if a[0] == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(a[0])
	}
	if err != nil {
		return err
	}
	_, _, err = cmd.c.do("POST", "/api/definitions", data)
	return cmd.done(err, "definitions imported")
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
