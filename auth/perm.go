package auth

import (
	"fmt"
	"regexp"
)

// Perm is one of the three RabbitMQ permission kinds.
type Perm uint8

const (
	// Configure: declare, delete or alter a resource.
	Configure Perm = iota + 1
	// Write: publish to an exchange, bind a queue or exchange as destination
	// (RabbitMQ checks write on the queue and read on the exchange for bind).
	Write
	// Read: consume from or purge a queue, use an exchange as a binding source.
	Read
)

func (p Perm) String() string {
	switch p {
	case Configure:
		return "configure"
	case Write:
		return "write"
	case Read:
		return "read"
	}
	return fmt.Sprintf("Perm(%d)", uint8(p))
}

// DefaultExchangeName is the resource name under which the default exchange
// "" is checked, as in RabbitMQ.
const DefaultExchangeName = "amq.default"

// Permission is a user's permission record in a vhost, as exported in
// definitions.json.
type Permission struct {
	User      string `json:"user"`
	VHost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

// permission is a Permission with its expressions compiled once.
type permission struct {
	Permission
	m [3]matcher // indexed by Perm-1
}

func compilePermission(p Permission) (*permission, error) {
	cp := &permission{Permission: p}
	for i, expr := range [3]string{p.Configure, p.Write, p.Read} {
		m, err := compileMatcher(expr)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: %v", ErrBadRegex, Perm(i+1), expr, err)
		}
		cp.m[i] = m
	}
	return cp, nil
}

func (p *permission) allows(perm Perm, name string) bool {
	if perm < Configure || perm > Read {
		return false
	}
	return p.m[perm-1].match(name)
}

// matcher is a compiled permission expression with fast paths for the two
// common cases, "" (nothing) and ".*" (everything).
type matcher struct {
	re  *regexp.Regexp
	all bool
}

func compileMatcher(expr string) (matcher, error) {
	switch expr {
	case "":
		return matcher{}, nil
	case ".*", "^.*": // both match every string, unanchored
		return matcher{all: true}, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return matcher{}, err
	}
	return matcher{re: re}, nil
}

func (m matcher) match(name string) bool {
	if m.all {
		return true
	}
	return m.re != nil && m.re.MatchString(name)
}
