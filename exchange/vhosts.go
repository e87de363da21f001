package exchange

import (
	"github.com/trident-broker/trident/exchange/event"
)

// EnsureVHost creates the vhost if it does not exist.
// The store write happens outside b.mu: in a cluster it is a Raft round
// trip whose application on this node takes b.mu.
func (b *Broker) EnsureVHost(name string) error {
	_, err := b.Apply(TopologyCommand{Op: TopoDeclareVHost, VHost: name})
	return err
}

// applyEnsureVHost applies a vhost.declare command standalone.
func (b *Broker) applyEnsureVHost(name string) error {
	if _, ok := b.VHost(name); ok {
		return nil
	}
	if err := checkName("vhost", name); err != nil {
		return err
	}
	if err := b.store.PutMeta("vhost/"+name, encodeRecord(Table{})); err != nil {
		return err
	}
	b.mu.Lock()
	_, ok := b.vhosts[name]
	if !ok {
		b.vhosts[name] = newVHost(b, name)
	}
	b.mu.Unlock()
	if !ok && b.events.On() {
		b.events.Emit(event.VHostCreated, event.Prop{Key: "name", Value: name})
	}
	return nil
}

// SetVHostMetadata stores a vhost's description and tags (management
// metadata; routing does not use them).
func (b *Broker) SetVHostMetadata(name, description string, tags []string) error {
	_, err := b.Apply(TopologyCommand{Op: TopoSetVHostMeta, VHost: name, Description: description, Tags: tags})
	return err
}

// applySetVHostMetadata applies a vhost.set-metadata command standalone.
func (b *Broker) applySetVHostMetadata(name, description string, tags []string) error {
	v, ok := b.VHost(name)
	if !ok {
		return errorf(KindNotFound, "no vhost '%s'", name)
	}
	t := make([]any, len(tags))
	for i, tag := range tags {
		t[i] = tag
	}
	if err := b.store.PutMeta("vhost/"+name, encodeRecord(Table{"description": description, "tags": t})); err != nil {
		return err
	}
	v.mu.Lock()
	v.description, v.tags = description, append([]string(nil), tags...)
	v.mu.Unlock()
	return nil
}

// DeleteVHost deletes a vhost with everything in it.
//
// In a cluster the delete is proposed: the vhost goes when it is
// committed and applied, here as on every node, and a delete that does
// not commit leaves it as it was.
func (b *Broker) DeleteVHost(name string) error {
	_, err := b.Apply(TopologyCommand{Op: TopoDeleteVHost, VHost: name})
	return err
}

// applyDeleteVHost applies a vhost.delete command standalone.
func (b *Broker) applyDeleteVHost(name string) error {
	b.mu.Lock()
	v, ok := b.vhosts[name]
	if ok {
		delete(b.vhosts, name)
	}
	b.mu.Unlock()
	if !ok {
		return errorf(KindNotFound, "no vhost '%s'", name)
	}
	for _, q := range v.Queues() {
		_, _ = v.deleteQueue(q)
	}
	v.stopRetries()
	for _, x := range v.Exchanges() {
		v.lockTopology()
		_ = v.deleteExchangeLocked(x)
		_ = v.unlockTopology()
	}
	if b.events.On() {
		b.events.Emit(event.VHostDeleted, event.Prop{Key: "name", Value: name})
	}
	if err := b.deleteVHostRecords(name); err != nil {
		return err
	}
	return b.store.DeleteMeta("vhost/" + name)
}

// stopRetries stops the vhost's retry delayer and drops what it held.
func (v *VHost) stopRetries() {
	if d := v.retryD.Load(); d != nil {
		d.stop(true)
	} else {
		_ = v.b.store.DropMessages(retryStoreID(v.name))
	}
}

// vhostRecordPrefixes are the record prefixes whose vhost's records go
// with it (by prefix, vhost name then NUL).
var vhostRecordPrefixes = []string{"exchange/", "queue/", "binding/", "policy/", opPolicyPrefix}

// deleteVHostRecords deletes the records of what vhost name held.
func (b *Broker) deleteVHostRecords(name string) error {
	for _, p := range vhostRecordPrefixes {
		if err := b.store.DeleteMetaPrefix(p + name + "\x00"); err != nil {
			return err
		}
	}
	return nil
}
