package shovel

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Ack modes (RabbitMQ's).
const (
	AckOnConfirm = "on-confirm" // the source is acked once the destination confirmed
	AckOnPublish = "on-publish" // the source is acked once published to the destination
	AckNoAck     = "no-ack"     // the source delivers without acknowledgements
)

// Defaults of a dynamic shovel, as RabbitMQ's.
const (
	DefaultPrefetch       = 1000
	DefaultReconnectDelay = 5 * time.Second
)

// FieldError is a definition that does not validate: Field names the key.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, a ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// Definition is a dynamic shovel's value, parsed from RabbitMQ's keys.
type Definition struct {
	SrcURIs         []string
	SrcQueue        string
	SrcExchange     string
	SrcExchangeKey  string
	DestURIs        []string
	DestQueue       string
	DestExchange    string
	DestExchangeKey string
	hasDestXKey     bool
	AckMode         string
	Prefetch        int
	// DeleteAfter: 0 never; -1 the source queue's length at start
	// ("queue-length"); n > 0 that many messages.
	DeleteAfter    int64
	ReconnectDelay time.Duration
	// AddForwardHeaders adds x-shovelled to each message, as RabbitMQ's
	// add-forward-headers.
	AddForwardHeaders bool
}

func str(v map[string]any, k string) (string, bool, error) {
	x, ok := v[k]
	if !ok || x == nil {
		return "", false, nil
	}
	s, isStr := x.(string)
	if !isStr {
		return "", false, fieldErr(k, "%v is not a string", x)
	}
	return s, true, nil
}

func number(v map[string]any, k string) (float64, bool, error) {
	x, ok := v[k]
	if !ok || x == nil {
		return 0, false, nil
	}
	switch n := x.(type) {
	case float64:
		return n, true, nil
	case int:
		return float64(n), true, nil
	case int64:
		return float64(n), true, nil
	case string:
		f, err := strconv.ParseFloat(n, 64)
		if err == nil {
			return f, true, nil
		}
	}
	return 0, false, fieldErr(k, "%v is not a number", x)
}

func uris(v map[string]any, k string) ([]string, error) {
	var list []string
	switch x := v[k].(type) {
	case nil:
		return nil, fieldErr(k, "is required")
	case string:
		list = []string{x}
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fieldErr(k, "%v is not a URI", e)
			}
			list = append(list, s)
		}
	default:
		return nil, fieldErr(k, "%v is not a URI or a list of URIs", x)
	}
	if len(list) == 0 {
		return nil, fieldErr(k, "is empty")
	}
	for _, u := range list {
		if err := checkURI(u); err != nil {
			return nil, fieldErr(k, "%v", err)
		}
	}
	return list, nil
}

// checkURI accepts "amqp://" and "amqp:///vhost" (this broker) and any URI
// amqp091-go parses.
// Its errors show the URI with its password hidden.
func checkURI(s string) error {
	shown := redact(s)
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("'%s' is not a URI: %v", shown, parseReason(err))
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return fmt.Errorf("'%s': the scheme must be amqp or amqps", shown)
	}
	if u.Host == "" {
		if u.Scheme != "amqp" {
			return fmt.Errorf("'%s': a local URI is amqp:// or amqp:///vhost", shown)
		}
		return nil
	}
	if _, err := amqp.ParseURI(s); err != nil {
		return fmt.Errorf("'%s' does not parse: %v", shown, parseReason(err))
	}
	return nil
}

// parseReason is a URI parse error without the URI (url.Error quotes it
// whole, password included).
func parseReason(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Parse validates a shovel's value.
func Parse(v map[string]any) (Definition, error) {
	d := Definition{AckMode: AckOnConfirm, Prefetch: DefaultPrefetch, ReconnectDelay: DefaultReconnectDelay}
	if p, ok := v["src-protocol"].(string); ok && p != "amqp091" {
		return d, fieldErr("src-protocol", "only amqp091 is supported, not '%s'", p)
	}
	if p, ok := v["dest-protocol"].(string); ok && p != "amqp091" {
		return d, fieldErr("dest-protocol", "only amqp091 is supported, not '%s'", p)
	}
	var err error
	if d.SrcURIs, err = uris(v, "src-uri"); err != nil {
		return d, err
	}
	if d.DestURIs, err = uris(v, "dest-uri"); err != nil {
		return d, err
	}
	var hasQ, hasX bool
	if d.SrcQueue, hasQ, err = str(v, "src-queue"); err != nil {
		return d, err
	}
	if d.SrcExchange, hasX, err = str(v, "src-exchange"); err != nil {
		return d, err
	}
	if d.SrcExchangeKey, _, err = str(v, "src-exchange-key"); err != nil {
		return d, err
	}
	switch {
	case hasQ && hasX:
		return d, fieldErr("src-queue", "give src-queue or src-exchange, not both")
	case !hasQ && !hasX:
		return d, fieldErr("src-queue", "a source is required: src-queue, or src-exchange (and src-exchange-key)")
	}
	if d.DestQueue, hasQ, err = str(v, "dest-queue"); err != nil {
		return d, err
	}
	if d.DestExchange, hasX, err = str(v, "dest-exchange"); err != nil {
		return d, err
	}
	if d.DestExchangeKey, d.hasDestXKey, err = str(v, "dest-exchange-key"); err != nil {
		return d, err
	}
	if hasQ && hasX {
		return d, fieldErr("dest-queue", "give dest-queue or dest-exchange, not both")
	}
	err = d.parseOptions(v)
	return d, err
}

// parseOptions reads the keys past the two ends.
func (d *Definition) parseOptions(v map[string]any) error {
	if a, ok, err := str(v, "ack-mode"); err != nil {
		return err
	} else if ok {
		switch a {
		case AckOnConfirm, AckOnPublish, AckNoAck:
			d.AckMode = a
		default:
			return fieldErr("ack-mode", "'%s' is not one of on-confirm, on-publish, no-ack", a)
		}
	}
	if n, ok, err := number(v, "src-prefetch-count"); err != nil {
		return err
	} else if ok {
		if n < 1 || n > 65535 || n != float64(int(n)) {
			return fieldErr("src-prefetch-count", "%v is not an integer in [1, 65535]", v["src-prefetch-count"])
		}
		d.Prefetch = int(n)
	}
	if n, ok, err := number(v, "reconnect-delay"); err != nil {
		return err
	} else if ok {
		if n < 0 || n > 86400 {
			return fieldErr("reconnect-delay", "%v is not a number of seconds in [0, 86400]", v["reconnect-delay"])
		}
		d.ReconnectDelay = time.Duration(n * float64(time.Second))
	}
	switch x := v["src-delete-after"].(type) {
	case nil:
	case string:
		switch x {
		case "never":
		case "queue-length":
			if d.SrcQueue == "" && d.SrcExchange != "" {
				return fieldErr("src-delete-after", "queue-length needs a src-queue")
			}
			d.DeleteAfter = -1
		default:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil || n < 1 {
				return fieldErr("src-delete-after", "'%s' is not never, queue-length or a positive number", x)
			}
			d.DeleteAfter = n
		}
	default:
		n, _, err := number(v, "src-delete-after")
		if err != nil || n < 1 || n != float64(int64(n)) {
			return fieldErr("src-delete-after", "%v is not never, queue-length or a positive number", x)
		}
		d.DeleteAfter = int64(n)
	}
	if b, ok := v["add-forward-headers"].(bool); ok {
		d.AddForwardHeaders = b
	}
	return nil
}

// localVHost reports whether uri names this broker ("amqp://",
// "amqp:///vhost") and which vhost.
func localVHost(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Host != "" {
		return "", false
	}
	p := strings.TrimPrefix(u.EscapedPath(), "/")
	if p == "" {
		return "/", true
	}
	vh, err := url.PathUnescape(p)
	if err != nil {
		return "", false
	}
	return vh, true
}

// redactedPassword stands for a URI's password in what the API shows.
const redactedPassword = "***"

// redact hides a URI's password, for the API and the log. A URI that does
// not parse has everything between "://" and its last "@" hidden.
func redact(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		scheme, rest, ok := strings.Cut(uri, "://")
		if at := strings.LastIndex(rest, "@"); ok && at >= 0 {
			return scheme + "://" + redactedPassword + rest[at:]
		}
		return uri
	}
	if u.User == nil {
		return uri
	}
	if _, ok := u.User.Password(); !ok {
		return uri
	}
	// "user:***@", without url's escaping of the stars.
	name := url.User(u.User.Username())
	u.User = name
	return strings.Replace(u.String(), "://"+name.String()+"@", "://"+name.String()+":"+redactedPassword+"@", 1)
}

// Redacted returns a copy of a shovel's value with the passwords of its
// URIs (src-uri, dest-uri: a string or a list) hidden, as the API shows
// it.
func Redacted(value map[string]any) map[string]any {
	out := make(map[string]any, len(value))
	for k, v := range value {
		out[k] = v
	}
	for _, k := range []string{"src-uri", "dest-uri"} {
		switch x := value[k].(type) {
		case string:
			out[k] = redact(x)
		case []any:
			l := make([]any, len(x))
			for i, e := range x {
				if s, ok := e.(string); ok {
					e = redact(s)
				}
				l[i] = e
			}
			out[k] = l
		}
	}
	return out
}
