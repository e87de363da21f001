package frontend

import (
	"errors"

	"github.com/trident-broker/trident/auth"
)

// DeniedAttrs returns the log attributes of an authorization refusal, the
// same on every protocol: the permission ("perm": configure, write,
// read), the resource ("kind": queue, exchange, topic; "resource": its
// name, the exchange for a topic) and, for a topic, "routing_key"; "err"
// for an error that is not an *auth.AccessError. The refusal itself is
// already in the audit log (auth records every refused check).
func DeniedAttrs(err error) []any {
	var ae *auth.AccessError
	if !errors.As(err, &ae) {
		return []any{"err", err}
	}
	if ae.Kind == "" {
		return []any{"kind", "vhost", "resource", ae.VHost}
	}
	attrs := []any{"perm", ae.Perm.String(), "kind", ae.Kind, "resource", ae.Name}
	if ae.Kind == "topic" {
		attrs = append(attrs, "routing_key", ae.Topic)
	}
	return attrs
}
