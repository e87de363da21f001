//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockStore takes an exclusive lock on the file dir+".lock" beside the
// store: an open store and a key rotation (rewrite.go) hold it, so
// neither starts while the other runs, even across the directory swap
// that would move Badger's own LOCK file. unlock releases it.
func lockStore(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrStoreInUse, dir)
		}
		return nil, fmt.Errorf("store: lock %s: %w", dir, err)
	}
	return func() { _ = f.Close() }, nil
}
