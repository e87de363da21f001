package auth

import (
	"fmt"
	"io"
	"log/slog"
	"os"
)

// Audit record messages. Every audit record is one slog record whose
// message is the event and whose attributes say who ("user"), from where
// ("remote", "protocol") and on what ("vhost", "name", ...).
const (
	AuditAuthSuccess       = "authentication.success"
	AuditAuthFailure       = "authentication.failure"
	AuditAuthBlocked       = "authentication.blocked" // refused by the rate limiter
	AuditPermissionSet     = "permission.set"
	AuditPermissionCleared = "permission.cleared"
	AuditTopicPermSet      = "topic_permission.set"
	AuditTopicPermCleared  = "topic_permission.cleared"
	AuditUserPut           = "user.put"
	AuditUserDeleted       = "user.deleted"
	AuditObjectCreated     = "object.created"
	AuditObjectDeleted     = "object.deleted"
	AuditAPIChange         = "api.change" // any successful mutating HTTP API request
)

// OpenAudit opens the audit sink: "" is off (nil logger, nil closer),
// "stderr" writes to standard error, anything else is a file appended to
// (created 0600). Records are JSON lines.
func OpenAudit(sink string) (*slog.Logger, io.Closer, error) {
	var w io.Writer
	var c io.Closer
	switch sink {
	case "":
		return nil, nil, nil
	case "stderr":
		w = os.Stderr
	default:
		f, err := os.OpenFile(sink, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("auth: audit sink: %w", err)
		}
		w, c = f, f
	}
	l := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})).With("log", "audit")
	return l, c, nil
}

var discardLogger = slog.New(slog.DiscardHandler)

// Audit returns the audit logger (Options.Audit), or a logger that discards
// everything when auditing is off, so callers need not check. Front ends
// and the HTTP API record object creation and deletion through it.
func (us *Users) Audit() *slog.Logger {
	if us.audit == nil {
		return discardLogger
	}
	return us.audit
}

// Auditing reports whether an audit sink is configured, for callers that
// would otherwise build attributes for nothing.
func (us *Users) Auditing() bool { return us.audit != nil }

// AuditObject records that user (from remote, over protocol) created or
// deleted (event) the object kind/name in vhost. Front ends call it for
// the objects their clients declare and delete.
func (us *Users) AuditObject(event, user, remote, protocol, vhost, kind, name string) {
	if us.audit == nil {
		return
	}
	us.audit.Info(event, "user", user, "remote", remote, "protocol", protocol, "vhost", vhost, "kind", kind, "name", name)
}
