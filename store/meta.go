package store

import (
	"bytes"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// PutMeta implements Store: the record is written and synced before it returns.
func (b *Badger) PutMeta(key string, val []byte) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	k := []byte(metaPrefix + key)
	v := bytes.Clone(val)
	if v == nil {
		v = []byte{}
	}
	b.writes.RLock()
	err := b.db.Update(func(txn *badger.Txn) error { return txn.Set(k, v) })
	b.writes.RUnlock()
	if err == nil {
		err = b.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("store: put meta %q: %w", key, err)
	}
	return nil
}

// WriteMetaBatch writes several metadata records in one transaction,
// synced before it returns: keys[i] gets vals[i], or is deleted when
// vals[i] is nil. A crash leaves all of them or none (the core's
// exchange.MetaBatcher: one topology command's records).
func (b *Badger) WriteMetaBatch(keys []string, vals [][]byte) error {
	if len(keys) != len(vals) {
		return fmt.Errorf("store: meta batch of %d keys and %d values", len(keys), len(vals))
	}
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	b.writes.RLock()
	err := b.db.Update(func(txn *badger.Txn) error {
		for i, key := range keys {
			k := []byte(metaPrefix + key)
			var err error
			if vals[i] == nil {
				err = txn.Delete(k)
			} else {
				err = txn.Set(k, bytes.Clone(vals[i]))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	b.writes.RUnlock()
	if err == nil {
		err = b.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("store: meta batch of %d records: %w", len(keys), err)
	}
	return nil
}

// DeleteMeta implements Store: the delete is synced before it returns.
func (b *Badger) DeleteMeta(key string) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	k := []byte(metaPrefix + key)
	b.writes.RLock()
	err := b.db.Update(func(txn *badger.Txn) error { return txn.Delete(k) })
	b.writes.RUnlock()
	if err == nil {
		err = b.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("store: delete meta %q: %w", key, err)
	}
	return nil
}

// DeleteMetaPrefix implements Store: the deletes are synced before it returns.
func (b *Badger) DeleteMetaPrefix(prefix string) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	b.writes.RLock()
	wb := b.db.NewWriteBatch()
	err := deletePrefix(b.db, wb, []byte(metaPrefix+prefix))
	if err == nil {
		err = wb.Flush()
	} else {
		wb.Cancel()
	}
	b.writes.RUnlock()
	if err == nil {
		err = b.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("store: delete meta prefix %q: %w", prefix, err)
	}
	return nil
}

// deletePrefix adds a delete of every key with prefix to wb.
func deletePrefix(db *badger.DB, wb *badger.WriteBatch, prefix []byte) error {
	return db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetMeta reads the record of key: a copy, and whether there is one.
func (b *Badger) GetMeta(key string) (val []byte, found bool, err error) {
	if err := b.begin(); err != nil {
		return nil, false, err
	}
	defer b.end()
	err = b.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(metaPrefix + key))
		if err != nil {
			return err
		}
		val, err = item.ValueCopy(nil)
		return err
	})
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("store: get meta %q: %w", key, err)
	}
	return val, true, nil
}

// LoadMeta implements Store. fn gets copies it may keep; an error from fn
// stops the scan and is returned as is.
func (b *Badger) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	return b.scan([]byte(metaPrefix+prefix), func(k, v []byte) error {
		return fn(string(k[len(metaPrefix):]), v)
	})
}
