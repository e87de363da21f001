package exchange

import (
	"sort"
	"strings"
)

// Operator policies, as RabbitMQ's: policies an operator sets to cap what
// applications (and their own policies) ask of queues. One of a vhost's
// operator policies applies to a queue besides its policy (the one of
// highest priority whose pattern matches, as for policies) and only its
// numeric limits count: for message-ttl, expires, max-length,
// max-length-bytes, delivery-limit, max-in-memory-length and
// max-in-memory-bytes the lower of the operator policy's value and the
// queue's own (x-argument or policy) wins. Other keys are refused. They
// apply to queues only. A record "oppolicy/<vhost>\x00<name>", replicated
// and recovered as policies are.

var operatorPolicyKeys = map[string]bool{
	polMessageTTL: true, polExpires: true, polMaxLength: true, polMaxLengthBytes: true,
	polDeliveryLimit: true, polMemLen: true, polMemBytes: true,
}

const opPolicyPrefix = "oppolicy/"

func compileOperatorPolicy(vhost string, p Policy) (*Policy, error) {
	if p.ApplyTo == "" {
		p.ApplyTo = ApplyToQueues
	}
	if p.ApplyTo != ApplyToQueues && p.ApplyTo != ApplyToAll {
		return nil, errorf(KindPreconditionFailed, "'%s' is not a valid apply-to value for an operator policy (queues)", p.ApplyTo)
	}
	keys := make([]string, 0, len(p.Definition))
	for k := range p.Definition {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !operatorPolicyKeys[k] {
			return nil, errorf(KindPreconditionFailed, "%s is not allowed in an operator policy", k)
		}
	}
	np, err := compilePolicy(vhost, p)
	if err != nil {
		return nil, err
	}
	np.ApplyTo = ApplyToQueues
	return np, nil
}

// matchOperatorLocked is the operator policy that applies to queue name;
// nil if none. v.mu is held.
func (v *VHost) matchOperatorLocked(name string) *Policy {
	var best *Policy
	for _, p := range v.opPolicies {
		if !p.re.MatchString(name) {
			continue
		}
		if best == nil || p.Priority > best.Priority || (p.Priority == best.Priority && p.Name < best.Name) {
			best = p
		}
	}
	return best
}

// withOperatorLimits lowers a's limits to op's (nil: none).
func (op *Policy) withOperatorLimits(a queueArgs) queueArgs {
	if op == nil {
		return a
	}
	d := op.Definition
	lower := func(cur *int64, key string, unset bool) {
		if n, ok := asInt64(d[key]); ok && (unset || n < *cur) {
			*cur = n
		}
	}
	lower(&a.messageTTL, polMessageTTL, a.messageTTL < 0)
	lower(&a.expires, polExpires, a.expires <= 0)
	lower(&a.maxLen, polMaxLength, a.maxLen < 0)
	lower(&a.maxLenBytes, polMaxLengthBytes, a.maxLenBytes < 0)
	lower(&a.deliveryLimit, polDeliveryLimit, a.deliveryLimit < 0)
	lower(&a.memLen, polMemLen, a.memLen < 0)
	lower(&a.memBytes, polMemBytes, a.memBytes < 0)
	return a
}

// SetOperatorPolicy creates or replaces an operator policy of the vhost
// and applies it at once; created reports a new one. An invalid one is
// refused with KindPreconditionFailed.
func (v *VHost) SetOperatorPolicy(p Policy) (created bool, err error) {
	np, err := compileOperatorPolicy(v.name, p)
	if err != nil {
		return false, err
	}
	r, err := v.Apply(TopologyCommand{Op: TopoSetOperatorPolicy, Name: np.Name, Pattern: np.Pattern, ApplyTo: np.ApplyTo,
		Priority: int64(np.Priority), Definition: np.Definition})
	return r.Created, err
}

// applySetOperatorPolicy applies an operator-policy.set command
// standalone.
func (v *VHost) applySetOperatorPolicy(c TopologyCommand) (created bool, err error) {
	np, err := compileOperatorPolicy(v.name, c.policy())
	if err != nil {
		return false, err
	}
	err = v.inTopology(func() error {
		_, existed := v.opPolicies[np.Name]
		created = !existed
		v.opPolicies[np.Name] = np
		v.putMetaLocked(v.opPolicyKey(np.Name), encodeRecord(np.record()))
		return nil
	})
	v.reapplyQueues()
	return created, err
}

// DeleteOperatorPolicy deletes an operator policy; KindNotFound if there
// is none.
func (v *VHost) DeleteOperatorPolicy(name string) error {
	_, err := v.Apply(TopologyCommand{Op: TopoDeleteOperatorPolicy, Name: name})
	return err
}

// applyDeleteOperatorPolicy applies an operator-policy.delete command
// standalone.
func (v *VHost) applyDeleteOperatorPolicy(c TopologyCommand) error {
	err := v.inTopology(func() error {
		if _, ok := v.opPolicies[c.Name]; !ok {
			return errorf(KindNotFound, "no operator policy '%s' in vhost '%s'", c.Name, v.name)
		}
		delete(v.opPolicies, c.Name)
		v.deleteMetaLocked(v.opPolicyKey(c.Name))
		return nil
	})
	if err == nil {
		v.reapplyQueues()
	}
	return err
}

// opPolicyKey is the record key of the vhost's operator policy name.
func (v *VHost) opPolicyKey(name string) string {
	return v.key(strings.TrimSuffix(opPolicyPrefix, "/"), name)
}

// OperatorPolicies returns the vhost's operator policies, sorted by name.
func (v *VHost) OperatorPolicies() []Policy { return v.listPolicies(true) }

// OperatorPolicy returns the named operator policy.
func (v *VHost) OperatorPolicy(name string) (Policy, bool) {
	return v.lookupPolicy(true, name)
}

// OperatorPolicy is the name of the operator policy applied to the queue
// ("" if none) and its definition (nil; do not modify).
func (q *Queue) OperatorPolicy() (name string, definition Table) {
	q.mu.Lock()
	p := q.coldOrZero().opPol
	q.mu.Unlock()
	if p == nil {
		return "", nil
	}
	return p.Name, p.Definition
}
