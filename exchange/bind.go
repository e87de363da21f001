package exchange

import (
	"fmt"
)

// BindQueue binds queue to exchange with key and args.
func (v *VHost) BindQueue(queue, exchange, key string, args Table, owner any) error {
	return v.bind(queue, true, exchange, key, args, owner)
}

// UnbindQueue removes a queue binding. Removing one that does not exist
// succeeds, as in RabbitMQ.
func (v *VHost) UnbindQueue(queue, exchange, key string, args Table, owner any) error {
	return v.unbind(queue, true, exchange, key, args, owner)
}

// BindExchange binds destination exchange dst to source src.
func (v *VHost) BindExchange(dst, src, key string, args Table) error {
	return v.bind(dst, false, src, key, args, nil)
}

// UnbindExchange removes an exchange-to-exchange binding.
func (v *VHost) UnbindExchange(dst, src, key string, args Table) error {
	return v.unbind(dst, false, src, key, args, nil)
}

func (v *VHost) lookupBind(dst string, toQueue bool, src string, owner any) (*Exchange, *Queue, *Exchange, error) {
	if src == "" || (dst == "" && !toQueue) {
		return nil, nil, nil, errorf(KindAccessRefused, "operation not permitted on the default exchange")
	}
	sx := v.exchanges[src]
	if sx == nil {
		return nil, nil, nil, v.errNoExchange(src)
	}
	if toQueue {
		q := v.queues[dst]
		if q == nil {
			return nil, nil, nil, v.errNoQueue(dst)
		}
		if q.exclusive && q.owner != owner && owner != anyOwner {
			return nil, nil, nil, errLocked(q)
		}
		return sx, q, nil, nil
	}
	dx := v.exchanges[dst]
	if dx == nil {
		return nil, nil, nil, v.errNoExchange(dst)
	}
	return sx, nil, dx, nil
}

func (v *VHost) bind(dst string, toQueue bool, src, key string, args Table, owner any) error {
	_, err := v.Apply(TopologyCommand{Op: TopoBind, Name: dst, ToQueue: toQueue, Source: src, Key: key, Args: args, Owner: owner})
	return err
}

func (v *VHost) bindLocked(dst string, toQueue bool, src, key string, args Table, owner any) error {
	sx, q, dx, err := v.lookupBind(dst, toQueue, src, owner)
	if err != nil {
		return err
	}
	if sx.findBinding(q, dx, key, args) != nil {
		return nil
	}
	if err := validateBinding(sx, key, args); err != nil {
		return err
	}
	b := &binding{src: sx, q: q, x: dx, key: key, args: args}
	if k := v.recordKeyOf(b); k != "" {
		v.putMetaLocked(k, encodeRecord(b.record()))
	}
	v.addBindingLocked(b)
	return nil
}

// validateBinding checks a new binding's key and arguments against its
// source's type.
func validateBinding(sx *Exchange, key string, args Table) error {
	if err := validateHashBinding(sx.kind, sx.args, key); err != nil {
		return err
	}
	if sx.kind == KindHeaders {
		if xm, ok := args["x-match"]; ok {
			s, _ := xm.(string)
			if s != "all" && s != "any" && s != "all-with-x" && s != "any-with-x" {
				return errorf(KindPreconditionFailed, "Invalid x-match field value %v; expected all, any, all-with-x, or any-with-x", xm)
			}
		}
	}
	return nil
}

func (v *VHost) addBindingLocked(b *binding) {
	listAdd(&b.src.bindings, b, srcPos)
	b.src.indexBinding(b)
	b.src.router.add(b)
	if b.q != nil {
		listAdd(&b.q.bindings, b, dstPos)
	} else {
		listAdd(&b.x.inbound, b, dstPos)
	}
	if b.src.event {
		v.noteEventBindings(b.src)
	}
}

func (v *VHost) unbind(dst string, toQueue bool, src, key string, args Table, owner any) error {
	_, err := v.Apply(TopologyCommand{Op: TopoUnbind, Name: dst, ToQueue: toQueue, Source: src, Key: key, Args: args, Owner: owner})
	return err
}

func (v *VHost) unbindLocked(dst string, toQueue bool, src, key string, args Table, owner any) error {
	sx, q, dx, err := v.lookupBind(dst, toQueue, src, owner)
	if KindOf(err) == KindNotFound {
		return nil // RabbitMQ 3.10: unbinding a missing queue or exchange is ok
	}
	if err != nil {
		return err
	}
	if b := sx.findBinding(q, dx, key, args); b != nil {
		v.removeBindingLocked(b, true)
	}
	return nil
}

// removeBindingLocked removes b; autoDelete lets an auto-delete source
// exchange go with its last binding.
func (v *VHost) removeBindingLocked(b *binding, autoDelete bool) {
	sx := b.src
	listRemove(&sx.bindings, b, srcPos)
	sx.unindexBinding(b)
	sx.router.remove(b)
	if sx.event {
		v.noteEventBindings(sx)
	}
	if b.q != nil {
		listRemove(&b.q.bindings, b, dstPos)
	} else {
		listRemove(&b.x.inbound, b, dstPos)
	}
	if k := v.recordKeyOf(b); k != "" {
		v.deleteMetaLocked(k)
	}
	if autoDelete && sx.autoDelete && len(sx.bindings) == 0 && v.exchanges[sx.name] == sx {
		_ = v.deleteExchangeLocked(sx)
	}
}

func (v *VHost) bindingKey(b *binding) string {
	dk := "e"
	if b.q != nil {
		dk = "q"
	}
	return fmt.Sprintf("binding/%s\x00%s\x00%s%s\x00%s\x00%x", v.name, b.src.name, dk, b.destName(), b.key, encodeRecord(b.args))
}

func (b *binding) record() Table {
	dk := "exchange"
	if b.q != nil {
		dk = "queue"
	}
	return Table{"source": b.src.name, "destination": b.destName(), "destination_type": dk, "routing_key": b.key, "args": b.args}
}

// BindingInfo describes one binding, for listings.
type BindingInfo struct {
	Source, Destination, DestinationType, RoutingKey string
	Args                                             Table
}

// Bindings lists every binding of the vhost (the implicit default-exchange
// bindings are not included).
func (v *VHost) Bindings() []BindingInfo {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []BindingInfo
	for _, x := range v.exchanges {
		for _, b := range x.bindings {
			r := b.record()
			out = append(out, BindingInfo{Source: x.name, Destination: b.destName(), DestinationType: r["destination_type"].(string), RoutingKey: b.key, Args: b.args})
		}
	}
	return out
}
