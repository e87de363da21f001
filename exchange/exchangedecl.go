package exchange

import (
	"strings"
)

// DeclareExchange declares (or, passively, checks) an exchange.
func (v *VHost) DeclareExchange(name, kind string, o ExchangeOpts) error {
	if o.Passive {
		if _, ok := v.Exchange(name); !ok {
			return v.errNoExchange(name)
		}
		return nil
	}
	_, err := v.Apply(TopologyCommand{Op: TopoDeclareExchange, Name: name, Type: kind, Durable: o.Durable,
		AutoDelete: o.AutoDelete, Internal: o.Internal, Args: o.Args})
	return err
}

// applyDeclareExchange applies an exchange.declare command.
func (v *VHost) applyDeclareExchange(c TopologyCommand) error {
	name, kind, o := c.Name, c.Type, c.exchangeOpts()
	if err := checkName("exchange", name); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		var pending *Exchange
		err := v.inTopology(func() error {
			var err error
			v.metaActor = c.Actor
			pending, err = v.declareExchangeLocked(name, kind, o)
			return err
		})
		if err != nil || pending == nil {
			return err
		}
		// A clustered declaration (see declareExchangeLocked): the
		// exchange the name holds now is this one, or another node's
		// that was created first.
		v.mu.RLock()
		cur := v.exchanges[name]
		v.mu.RUnlock()
		switch {
		case cur == pending:
			return nil
		case cur != nil:
			return cur.equivalent(kind, o)
		case attempt == 2:
			return errorf(KindInternal, "exchange '%s' in vhost '%s' was deleted while being declared", name, v.name)
		}
	}
}

// declareExchangeLocked declares an exchange. In a cluster it returns the
// new exchange pending: as a queue's (declareQueueLocked), its declaration
// is proposed, and the exchange exists once that is committed, unless
// another node's declaration of the name came first.
func (v *VHost) declareExchangeLocked(name, kind string, o ExchangeOpts) (*Exchange, error) {
	x := v.exchanges[name]
	// As RabbitMQ: the type is checked first, even for an existing exchange.
	if !validKind(kind) || !v.hashTypesEnabled(kind) {
		return nil, errorf(KindCommandInvalid, "unknown exchange type '%s'", kind)
	}
	if name == "" {
		return nil, errorf(KindAccessRefused, "operation not permitted on the default exchange")
	}
	if x != nil {
		return nil, x.equivalent(kind, o)
	}
	if strings.HasPrefix(name, "amq.") {
		return nil, errorf(KindAccessRefused, "exchange name '%s' contains reserved prefix 'amq.*'", name)
	}
	if kind == KindDelayed {
		if _, err := delayedTypeOf(o.Args); err != nil {
			return nil, err
		}
	}
	if err := v.validateHashArgs(kind, o.Args); err != nil {
		return nil, err
	}
	x = &Exchange{vh: v, name: name, kind: kind, durable: o.Durable, autoDelete: o.AutoDelete,
		internal: o.Internal, args: o.Args, router: routerFor(kind, o.Args)}
	if kind == KindDelayed {
		x.delay = newDelayer(v, name, v.b.nextQueueID(), o.Durable)
		v.putMetaLocked(x.delay.registryKey(), encodeRecord(Table{"vhost": v.name, "exchange": name}))
	}
	if ae, ok := o.Args["alternate-exchange"].(string); ok {
		x.alternate, x.hasAE = ae, true
	}
	if c := v.b.cluster; c != nil && !x.durable {
		x.home = c.NodeName()
	}
	k := v.exchangeKey(x)
	if k != "" && v.clustered() {
		if v.pendingX == nil {
			v.pendingX = map[string]*Exchange{}
		}
		v.pendingX[name] = x
		v.metaOps = append(v.metaOps, metaOp{key: k, val: encodeRecord(x.record()), createX: x})
		return x, nil
	}
	if k != "" {
		v.putMetaLocked(k, encodeRecord(x.record()))
	}
	v.installExchangeLocked(x)
	return nil, nil
}

// installExchangeLocked makes x the vhost's exchange of its name. Called
// with v.mu held.
func (v *VHost) installExchangeLocked(x *Exchange) {
	v.exchanges[x.name] = x
	if v.b.recovering {
		return // policies and delayers start once recovery is done
	}
	v.initExchangePolicyLocked(x)
	if x.delay != nil {
		x.delay.start()
	}
}

// settlePendingExchange ends x's pending create, as settlePending.
func (v *VHost) settlePendingExchange(x *Exchange) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pendingX[x.name] == x {
		delete(v.pendingX, x.name)
	}
}

func (x *Exchange) record() Table {
	r := Table{"type": x.kind, "durable": x.durable, "auto_delete": x.autoDelete,
		"internal": x.internal, "args": x.args}
	if x.home != "" {
		r["node"] = x.home
	}
	if x.delay != nil {
		r["delay_id"] = x.delay.id
	}
	return r
}

func (x *Exchange) equivalent(kind string, o ExchangeOpts) error {
	ineq := func(arg string, got, cur any) error {
		return errorf(KindPreconditionFailed, "inequivalent arg '%s' for exchange '%s' in vhost '%s': received '%v' but current is '%v'",
			arg, x.name, x.vh.name, got, cur)
	}
	switch {
	case kind != x.kind:
		return ineq("type", kind, x.kind)
	case o.Durable != x.durable:
		return ineq("durable", o.Durable, x.durable)
	case o.AutoDelete != x.autoDelete:
		return ineq("auto_delete", o.AutoDelete, x.autoDelete)
	case o.Internal != x.internal:
		return ineq("internal", o.Internal, x.internal)
	}
	if !tablesEqual(stripXArgs(o.Args, "alternate-exchange"), stripXArgs(x.args, "alternate-exchange")) {
		return ineq("alternate-exchange", o.Args["alternate-exchange"], x.args["alternate-exchange"])
	}
	if x.kind == KindDelayed && !tablesEqual(stripXArgs(o.Args, "x-delayed-type"), stripXArgs(x.args, "x-delayed-type")) {
		return ineq("x-delayed-type", o.Args["x-delayed-type"], x.args["x-delayed-type"])
	}
	return nil
}

func stripXArgs(t Table, keep ...string) Table {
	out := Table{}
	for _, k := range keep {
		if v, ok := t[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Exchange returns the named exchange, if it exists.
func (v *VHost) Exchange(name string) (*Exchange, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	x, ok := v.exchanges[name]
	return x, ok
}

// Exchanges returns all exchanges.
func (v *VHost) Exchanges() []*Exchange {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*Exchange, 0, len(v.exchanges))
	for _, x := range v.exchanges {
		out = append(out, x)
	}
	return out
}

// DeleteExchange deletes an exchange and its bindings. Deleting one that
// does not exist succeeds, as in RabbitMQ.
func (v *VHost) DeleteExchange(name string, ifUnused bool) error {
	_, err := v.Apply(TopologyCommand{Op: TopoDeleteExchange, Name: name, IfUnused: ifUnused})
	return err
}

// applyDeleteExchange applies an exchange.delete command on a node alone
// (in a cluster Apply proposes it: proposeChange).
func (v *VHost) applyDeleteExchange(c TopologyCommand) error {
	name, ifUnused := c.Name, c.IfUnused
	return v.inTopology(func() error {
		if name == "" || strings.HasPrefix(name, "amq.") {
			if name == "" {
				return errorf(KindAccessRefused, "operation not permitted on the default exchange")
			}
			return errorf(KindAccessRefused, "deletion of system exchange '%s' in vhost '%s' not allowed", name, v.name)
		}
		x := v.exchanges[name]
		if x == nil {
			return nil
		}
		if ifUnused && len(x.bindings) > 0 {
			return errorf(KindPreconditionFailed, "exchange '%s' in vhost '%s' in use", name, v.name)
		}
		return v.deleteExchangeLocked(x)
	})
}

// recordsGoneWith lists the records that go with the bindings gone (to be
// removed together): theirs, and those of the auto-delete sources they
// leave without bindings, but for except (whose record the caller deletes).
// It is what RecordsOf adds to an exchange's or a queue's delete.
func (v *VHost) recordsGoneWith(gone []*binding, except *Exchange) []string {
	in := make(map[*binding]bool, len(gone))
	for _, b := range gone {
		in[b] = true
	}
	var keys []string
	seen := map[*Exchange]bool{}
	for _, b := range gone {
		if k := v.recordKeyOf(b); k != "" {
			keys = append(keys, k)
		}
		sx := b.src
		if sx == except || seen[sx] || !sx.autoDelete || v.exchanges[sx.name] != sx {
			continue
		}
		seen[sx] = true
		emptied := true
		for _, o := range sx.bindings {
			if !in[o] {
				emptied = false
				break
			}
		}
		if k := v.exchangeKey(sx); emptied && k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

func (v *VHost) deleteExchangeLocked(x *Exchange) error {
	for len(x.bindings) > 0 {
		v.removeBindingLocked(x.bindings[len(x.bindings)-1], false)
	}
	// Removing the bindings into x may leave an auto-delete source
	// exchange without bindings: it goes too, as in RabbitMQ.
	for len(x.inbound) > 0 {
		v.removeBindingLocked(x.inbound[len(x.inbound)-1], true)
	}
	delete(v.exchanges, x.name)
	if k := v.exchangeKey(x); k != "" {
		v.deleteMetaLocked(k)
	}
	if x.delay != nil {
		x.delay.stop(true)
	}
	return nil
}
