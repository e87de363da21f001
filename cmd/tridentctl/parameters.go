package main

import (
	"encoding/json"
	"fmt"
)

// Shovels and MQTT bridges: runtime parameters of the shovel manager's two
// components, through the HTTP API with its permission checks (policymaker
// or administrator), as rabbitmqctl set_parameter shovel / clear_parameter /
// restart_shovel / shovel_status do for RabbitMQ's shovels:
//
//	declare shovel NAME --value JSON           PUT    /api/parameters/shovel/{vhost}/{name}
//	declare mqtt-bridge NAME (--value JSON | --address A --topic RULE ...)
//	                                           PUT    /api/parameters/mqtt-bridge/{vhost}/{name}
//	delete shovel|mqtt-bridge NAME             DELETE /api/parameters/{component}/{vhost}/{name}
//	restart shovel|mqtt-bridge NAME            DELETE /api/shovels/vhost/{vhost}/{name}/restart,
//	                                           DELETE /api/mqtt/bridges/{vhost}/{name}/restart
//	list shovels | list mqtt-bridges           GET    /api/shovels, /api/mqtt/bridges

// paramKind is one component's paths.
type paramKind struct {
	kind      string // the CLI's word: shovel, mqtt-bridge
	component string // the API's component
	what      string // for messages
	restart   func(vhost, name string) string
}

var shovelKind = paramKind{kind: "shovel", component: "shovel", what: "shovel",
	restart: func(vhost, name string) string {
		return "/api/shovels/vhost/" + esc(vhost) + "/" + esc(name) + "/restart"
	}}

var bridgeKind = paramKind{kind: "mqtt-bridge", component: "mqtt-bridge", what: "MQTT bridge",
	restart: func(vhost, name string) string {
		return "/api/mqtt/bridges/" + esc(vhost) + "/" + esc(name) + "/restart"
	}}

func (k paramKind) path(vhost, name string) string {
	return "/api/parameters/" + k.component + "/" + esc(vhost) + "/" + esc(name)
}

// parseValue reads a --value JSON object.
func parseValue(kind, s string) (map[string]any, error) {
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil || v == nil {
		return nil, usageError(fmt.Sprintf("--value must be a JSON object (the %s's definition), e.g. %s", kind, valueExample(kind)))
	}
	return v, nil
}

func valueExample(kind string) string {
	if kind == "shovel" {
		return `'{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://remote","dest-queue":"b"}'`
	}
	return `'{"address":"cloud:1883","topic":["sensors/# out 1"]}'`
}

func (k paramKind) declareForm() form {
	usage := "declare shovel NAME --value JSON"
	about := "Declares (or replaces) a dynamic shovel in --vhost: JSON is its definition as\n" +
		"rabbitmqctl set_parameter shovel takes it, e.g. " + valueExample("shovel") + "."
	if k.kind == "mqtt-bridge" {
		usage = "declare mqtt-bridge NAME (--value JSON | --address HOST:PORT --topic RULE ... [--remote-username U] [--remote-password P] [--remote-clientid ID] [--cleansession])"
		about = "Declares (or replaces) an MQTT bridge in --vhost, as Mosquitto's connection block: --topic is a rule\n" +
			"\"pattern [out|in|both [qos [local-prefix remote-prefix]]]\" (repeatable). --value gives the whole\n" +
			"definition as JSON instead, e.g. " + valueExample("mqtt-bridge") + " (see docs/scheduling.md)."
	}
	return form{kind: k.kind, usage: usage, about: about, setup: func(c *command, o *opts) func() error {
		value := o.fs.String("value", "", "the definition as a JSON `OBJECT`")
		var address, user, pass, clientID *string
		var clean *bool
		topics := &ruleList{}
		if k.kind == "mqtt-bridge" {
			address = o.fs.String("address", "", "the remote broker's `HOST:PORT` (several separated by spaces: tried in turn)")
			o.fs.Var(topics, "topic", "a topic `RULE` (repeatable)")
			user = o.fs.String("remote-username", "", "the `USER` name on the remote broker")
			pass = o.fs.String("remote-password", "", "the `PASSWORD` on the remote broker")
			clientID = o.fs.String("remote-clientid", "", "the client `ID` on the remote broker")
			clean = o.fs.Bool("cleansession", false, "a clean remote session (default: persistent, as Mosquitto's)")
		}
		return func() error {
			if err := o.need(1, 1, "the "+k.what+"'s NAME"); err != nil {
				return err
			}
			var v map[string]any
			switch {
			case *value != "" && address != nil && (*address != "" || len(*topics) > 0):
				return usageError("declare mqtt-bridge takes --value or --address and --topic, not both")
			case *value != "":
				var err error
				if v, err = parseValue(k.kind, *value); err != nil {
					return err
				}
			case address != nil && *address != "" && len(*topics) > 0:
				v = map[string]any{"address": *address, "topic": []string(*topics), "cleansession": *clean}
				for key, s := range map[string]*string{"remote_username": user, "remote_password": pass, "remote_clientid": clientID} {
					if *s != "" {
						v[key] = *s
					}
				}
			case address != nil:
				return usageError("declare mqtt-bridge needs --address and at least one --topic, or --value JSON")
			default:
				return usageError("declare shovel needs --value JSON, e.g. --value " + valueExample("shovel"))
			}
			obj := object{kind: k.what, name: o.args[0], vhost: c.vhost()}
			_, err := c.call(obj, "PUT", k.path(c.vhost(), o.args[0]), map[string]any{"value": v})
			return c.done(err, obj.String()+" declared")
		}
	}}
}

// namedForm is delete or restart of one shovel or bridge.
func (k paramKind) namedForm(verb string) form {
	usage := verb + " " + k.kind + " NAME"
	return form{kind: k.kind, usage: usage, setup: func(c *command, o *opts) func() error {
		return func() error {
			if err := o.need(1, 1, "the "+k.what+"'s NAME"); err != nil {
				return err
			}
			obj := object{kind: k.what, name: o.args[0], vhost: c.vhost()}
			path := k.path(c.vhost(), o.args[0])
			if verb == "restart" {
				path = k.restart(c.vhost(), o.args[0])
			}
			_, err := c.call(obj, "DELETE", path, nil)
			past := map[string]string{"delete": " deleted", "restart": " restarted"}[verb]
			return c.done(err, obj.String()+past)
		}
	}}
}

// ruleList collects repeated --topic flags.
type ruleList []string

func (l *ruleList) String() string     { return "" }
func (l *ruleList) Set(v string) error { *l = append(*l, v); return nil }

func (k paramKind) deleteForm() form  { return k.namedForm("delete") }
func (k paramKind) restartForm() form { return k.namedForm("restart") }
