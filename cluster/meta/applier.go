package meta

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/trident-broker/trident/exchange"
)

// StoreApplier is the Applier of a node: it writes committed ops to the
// node's local store (the one under its Store wrapper), then passes them
// to each hook in turn (the core's Broker.ApplyMeta, the users'
// ApplyMeta) so memory follows. A snapshot restore becomes the ops that
// turn the local records into the snapshot's, applied the same way.
type StoreApplier struct {
	Local      exchange.Store
	Replicated func(key string) bool
	Hooks      []func(ops []exchange.MetaOp) error
	// Rank, if set, orders a restore's ops: puts by ascending rank (a
	// vhost before its queues), deletes by descending rank, before puts.
	Rank func(key string) int
	// Stamp, if set, says which keys hold ordered records (ok) and a
	// record's place in their order, (epoch, seq) compared in turn: a put
	// of such a key that orders before the stored record is left out, as
	// a create is, so that of two writers' records the later one is kept
	// whatever the commit order (exchange.MetaStamp: stream offsets).
	Stamp func(key string, val []byte) (epoch, seq uint64, ok bool)
	// Topology applies a committed topology command to memory and returns
	// the records it makes or removes (exchange.Broker.ApplyCommitted),
	// which the applier writes to Local. nil: the node applies none.
	Topology func(c exchange.TopologyCommand) ([]exchange.MetaOp, error)
	// Users applies a committed users command (encoded auth.Command) to
	// memory and returns the records it makes or removes
	// (auth.Users.ApplyCommittedEntry, its records as MetaOps), which the
	// applier writes to Local. nil: the node applies none.
	Users func(cmd []byte) ([]exchange.MetaOp, error)
	// Parameters applies a committed parameter command (encoded
	// shovel.Command) as Users does (shovel.Manager.ApplyCommittedEntry).
	Parameters func(cmd []byte) ([]exchange.MetaOp, error)
}

var (
	_ Applier           = (*StoreApplier)(nil)
	_ TopologyApplier   = (*StoreApplier)(nil)
	_ UsersApplier      = (*StoreApplier)(nil)
	_ ParametersApplier = (*StoreApplier)(nil)
)

// ApplyUsers implements UsersApplier: the command changes memory, then
// its records are written to the local store, in one batch where the
// store has them (not passed to the hooks: the users applied them).
func (a *StoreApplier) ApplyUsers(cmd []byte) error {
	return a.applyOpaque("users", a.Users, cmd)
}

// ApplyParameters implements ParametersApplier, as ApplyUsers.
func (a *StoreApplier) ApplyParameters(cmd []byte) error {
	return a.applyOpaque("parameter", a.Parameters, cmd)
}

func (a *StoreApplier) applyOpaque(kind string, apply func([]byte) ([]exchange.MetaOp, error), cmd []byte) error {
	if apply == nil {
		return fmt.Errorf("%w: this node applies no %s commands", ErrUnreadable, kind)
	}
	ops, err := apply(cmd)
	if len(ops) == 0 {
		return err
	}
	if werr := a.writeLocal(ops); werr != nil {
		return errors.Join(err, fmt.Errorf("meta: write the records of a %s command: %w", kind, werr))
	}
	return err
}

// ApplyTopology implements TopologyApplier: the command changes memory,
// then its records are written to the local store, in one batch where the
// store has them. They are not passed to the hooks: the core, whose
// records they are, has applied them already.
func (a *StoreApplier) ApplyTopology(c exchange.TopologyCommand) error {
	if a.Topology == nil {
		return fmt.Errorf("%w: this node applies no topology commands", ErrUnreadable)
	}
	ops, err := a.Topology(c)
	if len(ops) == 0 {
		return err
	}
	werr := a.writeLocal(ops)
	if werr != nil {
		werr = fmt.Errorf("meta: write the records of %v: %w", c.Op, werr)
	}
	return errors.Join(err, werr)
}

// writeLocal writes ops to the local store, in one batch where it has
// them and no op is a prefix delete.
func (a *StoreApplier) writeLocal(ops []exchange.MetaOp) error {
	prefix := false
	for _, op := range ops {
		prefix = prefix || op.Prefix
	}
	var werr error
	if bs, ok := a.Local.(exchange.MetaBatcher); ok && !prefix {
		keys := make([]string, len(ops))
		vals := make([][]byte, len(ops))
		for i, op := range ops {
			keys[i], vals[i] = op.Key, op.Val
		}
		werr = bs.WriteMetaBatch(keys, vals)
	} else {
		for _, op := range ops {
			if op.Prefix {
				werr = a.Local.DeleteMetaPrefix(op.Key)
			} else if op.Val == nil {
				werr = a.Local.DeleteMeta(op.Key)
			} else {
				werr = a.Local.PutMeta(op.Key, op.Val)
			}
			if werr != nil {
				break
			}
		}
	}
	return werr
}

// ApplyMeta implements Applier. A create (MetaOp.Create) whose key holds
// another record already is left out: neither written nor passed to the
// hooks; so is a put of an ordered key (Stamp) that orders before the
// stored record. Every node decides it alike, from the same replicated
// records at the same log index.
func (a *StoreApplier) ApplyMeta(ops []exchange.MetaOp) error {
	kept := make([]exchange.MetaOp, 0, len(ops))
	for _, op := range ops {
		var err error
		switch {
		case op.Prefix:
			err = a.Local.DeleteMetaPrefix(op.Key)
		case op.Val == nil:
			err = a.Local.DeleteMeta(op.Key)
		default:
			if op.Create {
				cur, found, gerr := a.get(op.Key)
				if gerr != nil {
					return fmt.Errorf("meta: read %q: %w", op.Key, gerr)
				}
				if found && !bytes.Equal(cur, op.Val) {
					continue // another record was there first
				}
			}
			if older, err := a.older(op); err != nil {
				return err
			} else if older {
				continue // a later record is there
			}
			err = a.Local.PutMeta(op.Key, op.Val)
		}
		if err != nil {
			return fmt.Errorf("meta: write %q: %w", op.Key, err)
		}
		kept = append(kept, op)
	}
	if len(kept) == 0 {
		return nil
	}
	var errs []error
	for _, h := range a.Hooks {
		if err := h(kept); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// older reports whether op puts an ordered record before the stored one.
func (a *StoreApplier) older(op exchange.MetaOp) (bool, error) {
	if a.Stamp == nil {
		return false, nil
	}
	e, n, ok := a.Stamp(op.Key, op.Val)
	if !ok {
		return false, nil
	}
	cur, found, err := a.get(op.Key)
	if err != nil {
		return false, fmt.Errorf("meta: read %q: %w", op.Key, err)
	}
	if !found {
		return false, nil
	}
	ce, cn, _ := a.Stamp(op.Key, cur)
	return e < ce || (e == ce && n < cn), nil
}

// get reads one record of the local store.
func (a *StoreApplier) get(key string) (val []byte, found bool, err error) {
	err = a.Local.LoadMeta(key, func(k string, v []byte) error {
		if k == key {
			val, found = bytes.Clone(v), true
		}
		return nil
	})
	return val, found, err
}

// ExportMeta implements Applier.
func (a *StoreApplier) ExportMeta(fn func(key string, val []byte) error) error {
	return a.Local.LoadMeta("", func(key string, val []byte) error {
		if !a.Replicated(key) {
			return nil
		}
		return fn(key, val)
	})
}

// RestoreMeta implements Applier: deletes of the replicated records not in
// records, then puts of the records that differ, ordered by Rank and key.
func (a *StoreApplier) RestoreMeta(records map[string][]byte) error {
	var dels, puts []exchange.MetaOp
	seen := map[string]bool{}
	err := a.ExportMeta(func(key string, val []byte) error {
		seen[key] = true
		want, ok := records[key]
		switch {
		case !ok:
			dels = append(dels, exchange.MetaOp{Key: key})
		case string(want) != string(val):
			puts = append(puts, exchange.MetaOp{Key: key, Val: want})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for k, v := range records {
		if !seen[k] {
			puts = append(puts, exchange.MetaOp{Key: k, Val: v})
		}
	}
	rank := a.Rank
	if rank == nil {
		rank = func(string) int { return 0 }
	}
	order := func(x, y exchange.MetaOp) int {
		if c := cmp.Compare(rank(x.Key), rank(y.Key)); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	}
	slices.SortFunc(dels, func(x, y exchange.MetaOp) int { return order(y, x) })
	slices.SortFunc(puts, order)
	ops := append(dels, puts...)
	if len(ops) == 0 {
		return nil
	}
	return a.ApplyMeta(ops)
}
