package main

import (
	"net/url"
)

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
