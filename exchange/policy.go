package exchange

import (
	"regexp"
	"sort"

	"github.com/trident-broker/trident/exchange/event"
)

// Policies, as RabbitMQ's (not operator policies): a named rule of a vhost
// that gives settings to the queues and/or exchanges whose names match a
// regular expression.
//
//   - Of the policies that match an object, the one with the highest
//     priority applies; among equal priorities, the one whose name sorts
//     first (RabbitMQ leaves that tie unspecified).
//   - A queue's effective settings combine its x-arguments with the
//     policy as RabbitMQ 3.10 does: for message-ttl, expires, max-length,
//     max-length-bytes and delivery-limit the lower value wins; for
//     dead-letter-exchange, dead-letter-routing-key and overflow (and an
//     exchange's alternate-exchange) the x-argument wins when present.
//   - Other definition keys (ha-mode, queue-mode, federation-upstream...)
//     are kept and reported but have no effect.
//   - Setting, changing or deleting a policy re-evaluates every queue and
//     exchange of the vhost at once: a lower max-length drops (or
//     dead-letters) head messages of drop-head queues, a new message-ttl
//     applies to the messages already queued (RabbitMQ keeps their
//     expiry from publish time), a new expires restarts the idle timer.
//   - A policy is a topology record ("policy/<vhost>\x00<name>"), so it is
//     replicated in a cluster (ApplyMeta) and recovered at start.

// Policy targets (apply-to).
const (
	ApplyToQueues    = "queues"
	ApplyToExchanges = "exchanges"
	ApplyToAll       = "all"
)

// Policy is one policy of a vhost. Definition must not be modified once
// the policy is set.
type Policy struct {
	VHost      string
	Name       string
	Pattern    string
	ApplyTo    string // ApplyToQueues, ApplyToExchanges or ApplyToAll
	Priority   int
	Definition Table

	re *regexp.Regexp
}

// Policy definition keys with an effect.
const (
	polMessageTTL     = "message-ttl"
	polExpires        = "expires"
	polMaxLength      = "max-length"
	polMaxLengthBytes = "max-length-bytes"
	polDeliveryLimit  = "delivery-limit"
	polDLX            = "dead-letter-exchange"
	polDLRK           = "dead-letter-routing-key"
	polOverflow       = "overflow"
	polAE             = "alternate-exchange"
	polMemLen         = "max-in-memory-length"
	polMemBytes       = "max-in-memory-bytes"
	polQueueMode      = "queue-mode"
)

// compilePolicy validates p and returns a copy ready to be set.
func compilePolicy(vhost string, p Policy) (*Policy, error) {
	invalid := func(format string, a ...any) error {
		return errorf(KindPreconditionFailed, format, a...)
	}
	if p.Name == "" {
		return nil, invalid("policy name must not be empty")
	}
	if p.ApplyTo == "" {
		p.ApplyTo = ApplyToAll
	}
	switch p.ApplyTo {
	case ApplyToQueues, ApplyToExchanges, ApplyToAll:
	default:
		return nil, invalid("'%s' is not a valid apply-to value", p.ApplyTo)
	}
	re, err := regexp.Compile(p.Pattern)
	if err != nil {
		return nil, invalid("pattern '%s' is not a valid regular expression: %v", p.Pattern, err)
	}
	if len(p.Definition) == 0 {
		return nil, invalid("no policy provided")
	}
	if err := validateDefinition(p.Definition); err != nil {
		return nil, err
	}
	def := make(Table, len(p.Definition))
	for k, val := range p.Definition {
		def[k] = val
	}
	p.VHost, p.Definition, p.re = vhost, def, re
	return &p, nil
}

func validateDefinition(def Table) error {
	keys := make([]string, 0, len(def))
	for k := range def {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := def[k]
		if handled, err := validateSchedKey(k, val); handled {
			if err != nil {
				return err
			}
			continue
		}
		min := int64(-1)
		switch k {
		case polMessageTTL, polMaxLength, polMaxLengthBytes, polDeliveryLimit, polMemLen, polMemBytes:
			min = 0
		case polQueueMode:
			if val != "lazy" && val != "default" {
				return errorf(KindPreconditionFailed, "%v is not a valid queue-mode value", val)
			}
		case polExpires:
			min = 1
		case polDLX, polDLRK, polAE:
			if _, ok := val.(string); !ok {
				return errorf(KindPreconditionFailed, "%s must be a string, got %v", k, val)
			}
		case polOverflow:
			switch val {
			case OverflowDropHead, OverflowRejectPublish, OverflowRejectPublishDLX:
			default:
				return errorf(KindPreconditionFailed, "%v is not a valid overflow value", val)
			}
		}
		if min >= 0 {
			n, ok := asInt64(val)
			if _, isStr := val.(string); isStr || !ok || n < min {
				return errorf(KindPreconditionFailed, "%s must be an integer of at least %d, got %v", k, min, val)
			}
		}
	}
	return nil
}

func (p *Policy) record() Table {
	return Table{"pattern": p.Pattern, "apply-to": p.ApplyTo, "priority": int64(p.Priority), "definition": p.Definition}
}

func (p *Policy) same(o *Policy) bool {
	return p.Pattern == o.Pattern && p.ApplyTo == o.ApplyTo && p.Priority == o.Priority &&
		tablesEqual(p.Definition, o.Definition)
}

func (p *Policy) public() Policy {
	c := *p
	c.re = nil
	return c
}

// matchLocked is the policy that applies to a queue (exchange false) or
// exchange named name; nil if none. v.mu is held.
func (v *VHost) matchLocked(exchange bool, name string) *Policy {
	var best *Policy
	for _, p := range v.policies {
		switch {
		case p.ApplyTo == ApplyToQueues && exchange, p.ApplyTo == ApplyToExchanges && !exchange:
			continue
		case !p.re.MatchString(name):
			continue
		}
		if best == nil || p.Priority > best.Priority || (p.Priority == best.Priority && p.Name < best.Name) {
			best = p
		}
	}
	return best
}

// withPolicy combines a queue's parsed x-arguments xa (declared as args)
// with p's definition.
func (p *Policy) withPolicy(xa queueArgs, args Table) queueArgs {
	a := xa
	if p == nil {
		return a
	}
	d := p.Definition
	lower := func(cur *int64, key string, unset bool) {
		n, ok := asInt64(d[key])
		if ok && (unset || n < *cur) {
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
	if d[polQueueMode] == "lazy" {
		if _, set := args["x-queue-mode"]; !set {
			a.memLen = 0
		}
	}
	if s, ok := d[polDLX].(string); ok && !xa.hasDLX {
		a.dlx, a.hasDLX = s, true
	}
	if s, ok := d[polDLRK].(string); ok && !xa.hasDLRK {
		a.dlrk, a.hasDLRK = s, true
	}
	if s, ok := d[polOverflow].(string); ok {
		if _, set := args["x-overflow"]; !set {
			a.overflow = s
		}
	}
	a.sched = withSchedPolicy(xa.sched, d)
	return a
}

// setPolicyLocked makes p (nil: none) q's policy and carries out what
// the new effective settings imply. q.mu is held; dead-lettered messages
// go out at q.unlock.
func (q *Queue) setPolicyLocked(p *Policy) {
	c := q.coldState()
	c.pol = p
	if q.st != nil {
		return // a stream takes no classic policy keys (expires, TTL, limits...)
	}
	a := c.opPol.withOperatorLimits(p.withPolicy(*q.xa, q.args))
	now := nowNano()
	old := q.cmdSetArgs(a, now) // a deleted queue's state is empty
	q.syncSchedLocked()
	if q.deleted {
		return
	}
	if a.expires != old.expires {
		if c.idleTimer != nil {
			c.idleTimer.Stop()
			c.idleTimer = nil
		}
		if a.expires > 0 {
			q.armIdleTimer()
		}
	}
	if q.proxy() != nil {
		return // the owning node enforces limits and TTLs
	}
	if a.messageTTL != old.messageTTL {
		if c.expTimer != nil {
			c.expTimer.Stop()
		}
		c.expAt = 0
		q.scheduleExpiry(now)
	}
}

// initPolicyLocked gives a queue entering v.queues its policy. v.mu is
// held (for writing) and q is new.
func (v *VHost) initPolicyLocked(q *Queue) {
	p, op := v.matchLocked(false, q.name), v.matchOperatorLocked(q.name)
	if c := q.coldOrZero(); p == nil && c.pol == nil && op == nil && c.opPol == nil {
		return
	}
	q.mu.Lock()
	q.coldState().opPol = op
	q.setPolicyLocked(p)
	q.flush()
	q.mu.Unlock() // a new queue has nothing to dead-letter (it routes under v.mu)
}

// setPolicyLocked makes p (nil: none) x's policy. v.mu is held.
func (x *Exchange) setPolicyLocked(p *Policy) {
	x.pol = p
	x.alternate, x.hasAE = "", false
	if ae, ok := x.args["alternate-exchange"].(string); ok {
		x.alternate, x.hasAE = ae, true
	} else if p != nil {
		if ae, ok := p.Definition[polAE].(string); ok {
			x.alternate, x.hasAE = ae, true
		}
	}
}

// initExchangePolicyLocked gives an exchange entering v.exchanges its
// policy. v.mu is held.
func (v *VHost) initExchangePolicyLocked(x *Exchange) {
	if x.name == "" {
		return // the default exchange takes no policy
	}
	if p := v.matchLocked(true, x.name); p != nil || x.pol != nil {
		x.setPolicyLocked(p)
	}
}

// reapplyExchangesLocked re-evaluates every exchange. v.mu is held.
func (v *VHost) reapplyExchangesLocked() {
	for _, x := range v.exchanges {
		if x.name != "" {
			x.setPolicyLocked(v.matchLocked(true, x.name))
		}
	}
}

// reapplyQueues re-evaluates every queue. It takes v.mu (shared) and
// each queue's lock in turn; the match and its application happen under
// both, so concurrent re-evaluations leave each queue with the policy
// of the latest policy set.
func (v *VHost) reapplyQueues() {
	for _, q := range v.Queues() {
		v.mu.RLock()
		if v.queues[q.name] != q {
			v.mu.RUnlock()
			continue
		}
		p, op := v.matchLocked(false, q.name), v.matchOperatorLocked(q.name)
		q.mu.Lock()
		if c := q.coldOrZero(); p == c.pol && op == c.opPol {
			q.mu.Unlock()
			v.mu.RUnlock()
			continue
		}
		q.coldState().opPol = op
		q.setPolicyLocked(p)
		v.mu.RUnlock()
		q.unlock() // dead-letters, which routes under v.mu
	}
}

// SetPolicy creates or replaces a policy of the vhost (p.VHost is
// ignored) and applies it at once. created reports a new policy. An
// invalid policy is refused with KindPreconditionFailed.
func (v *VHost) SetPolicy(p Policy) (created bool, err error) {
	np, err := compilePolicy(v.name, p)
	if err != nil {
		return false, err
	}
	r, err := v.Apply(TopologyCommand{Op: TopoSetPolicy, Name: np.Name, Pattern: np.Pattern, ApplyTo: np.ApplyTo,
		Priority: int64(np.Priority), Definition: np.Definition})
	if err == nil && v.b.events.On() {
		v.b.events.Emit(event.PolicySet, event.Prop{Key: "name", Value: np.Name}, event.Prop{Key: "vhost", Value: v.name},
			event.Prop{Key: "pattern", Value: np.Pattern}, event.Prop{Key: "apply-to", Value: np.ApplyTo},
			event.Prop{Key: "priority", Value: int64(np.Priority)}, event.Prop{Key: "definition", Value: tableOrEmpty(np.Definition)})
	}
	return r.Created, err
}

// applySetPolicy applies a policy.set command standalone.
func (v *VHost) applySetPolicy(c TopologyCommand) (created bool, err error) {
	np, err := compilePolicy(v.name, c.policy())
	if err != nil {
		return false, err
	}
	err = v.inTopology(func() error {
		_, existed := v.policies[np.Name]
		created = !existed
		v.policies[np.Name] = np
		v.reapplyExchangesLocked()
		v.putMetaLocked(v.key("policy", np.Name), encodeRecord(np.record()))
		return nil
	})
	v.reapplyQueues()
	return created, err
}

// DeletePolicy deletes a policy; KindNotFound if there is none.
func (v *VHost) DeletePolicy(name string) error {
	_, err := v.Apply(TopologyCommand{Op: TopoDeletePolicy, Name: name})
	if err == nil && v.b.events.On() {
		v.b.events.Emit(event.PolicyCleared, event.Prop{Key: "name", Value: name}, event.Prop{Key: "vhost", Value: v.name})
	}
	return err
}

// applyDeletePolicy applies a policy.delete command standalone.
func (v *VHost) applyDeletePolicy(c TopologyCommand) error {
	name := c.Name
	err := v.inTopology(func() error {
		if _, ok := v.policies[name]; !ok {
			return errorf(KindNotFound, "no policy '%s' in vhost '%s'", name, v.name)
		}
		delete(v.policies, name)
		v.reapplyExchangesLocked()
		v.deleteMetaLocked(v.key("policy", name))
		return nil
	})
	if err == nil {
		v.reapplyQueues()
	}
	return err
}

// Policies returns the vhost's policies, sorted by name.
func (v *VHost) Policies() []Policy { return v.listPolicies(false) }

// Policy returns the named policy.
func (v *VHost) Policy(name string) (Policy, bool) { return v.lookupPolicy(false, name) }

// policyMap is the vhost's policies, or its operator policies (v.mu held).
func (v *VHost) policyMap(operator bool) map[string]*Policy {
	if operator {
		return v.opPolicies
	}
	return v.policies
}

// listPolicies returns the vhost's policies or operator policies, sorted
// by name.
func (v *VHost) listPolicies(operator bool) []Policy {
	v.mu.RLock()
	ps := v.policyMap(operator)
	out := make([]Policy, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.public())
	}
	v.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// lookupPolicy returns the policy or operator policy name.
func (v *VHost) lookupPolicy(operator bool, name string) (Policy, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p, ok := v.policyMap(operator)[name]
	if !ok {
		return Policy{}, false
	}
	return p.public(), true
}

// Policy is the name of the policy applied to the queue ("" if none)
// and that policy's definition (nil; do not modify).
func (q *Queue) Policy() (name string, definition Table) {
	q.mu.Lock()
	p := q.coldOrZero().pol
	q.mu.Unlock()
	if p == nil {
		return "", nil
	}
	return p.Name, p.Definition
}

// Policy is the name and definition of the policy applied to the
// exchange ("" and nil if none).
func (x *Exchange) Policy() (name string, definition Table) {
	x.vh.mu.RLock()
	p := x.pol
	x.vh.mu.RUnlock()
	if p == nil {
		return "", nil
	}
	return p.Name, p.Definition
}
