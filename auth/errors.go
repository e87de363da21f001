package auth

import (
	"errors"
	"fmt"
)

var (
	// ErrBadCredentials: unknown user, wrong password, or a user without a
	// password. Deliberately does not say which.
	ErrBadCredentials = errors.New("auth: bad credentials")
	// ErrLoopbackOnly: the password was right, but the user is in
	// Options.LoopbackUsers and connected from a non-loopback address.
	ErrLoopbackOnly = errors.New("auth: user may only connect from a loopback address")
	// ErrAccessRefused is wrapped by every *AccessError.
	ErrAccessRefused = errors.New("auth: access refused")
	// ErrNoSuchUser: an admin operation named a user that does not exist.
	ErrNoSuchUser = errors.New("auth: no such user")
	// ErrBadHash: PutUserHash got a value that is not base64 of a 4-byte salt
	// and a SHA-256 or SHA-512 digest.
	ErrBadHash = errors.New("auth: password hash is not base64(salt+sha256) or base64(salt+sha512)")
	// ErrBadName: a user or vhost name is empty or not valid UTF-8.
	ErrBadName = errors.New("auth: name must be non-empty UTF-8")
	// ErrBadRegex: a permission expression does not compile (RE2 syntax).
	ErrBadRegex = errors.New("auth: invalid permission regex")
	// ErrTooManyAttempts: the source address had too many failed logins
	// and is in its back-off period; the password was not checked.
	ErrTooManyAttempts = errors.New("auth: too many failed logins from this address, try again later")
)

// AccessError is returned by Check and CheckVHost. Its Error text is
// RabbitMQ's, without a package prefix, so a front end can send it as a
// reply text (AMQP prefixes it with "ACCESS_REFUSED - "). It wraps
// ErrAccessRefused.
type AccessError struct {
	User  string
	VHost string
	Perm  Perm   // zero for vhost access
	Kind  string // "queue", "exchange", "topic"...; empty for vhost access
	Name  string // for Kind "topic": the exchange
	Topic string // for Kind "topic": the routing or binding key
}

func (e *AccessError) Error() string {
	if e.Kind == "" {
		return fmt.Sprintf("access to vhost '%s' refused for user '%s'", e.VHost, e.User)
	}
	if e.Kind == "topic" {
		return fmt.Sprintf("%s access to topic '%s' in exchange '%s' in vhost '%s' refused for user '%s'",
			e.Perm, e.Topic, e.Name, e.VHost, e.User)
	}
	return fmt.Sprintf("%s access to %s '%s' in vhost '%s' refused for user '%s'",
		e.Perm, e.Kind, e.Name, e.VHost, e.User)
}

// Unwrap makes errors.Is(err, ErrAccessRefused) hold.
func (e *AccessError) Unwrap() error { return ErrAccessRefused }
