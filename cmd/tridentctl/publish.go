package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
)

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
