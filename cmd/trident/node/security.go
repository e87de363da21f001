package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/cluster/raftstore"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/store"
)

// storeOptions returns the store's options: encrypted with the key in
// encryption.key_file when set (a key file others may read is warned
// about).
func storeOptions(cfg conf.Config, log *slog.Logger) (store.BadgerOptions, error) {
	var o store.BadgerOptions
	if cfg.Encryption.KeyFile != "" {
		k, err := readKeyFile(cfg.Encryption.KeyFile, "encryption.key_file", log)
		if err != nil {
			return o, err
		}
		o.EncryptionKey = k
	}
	return o, nil
}

// readKeyFile reads an encryption key file, and logs a warning when its
// mode lets the group or others read or write it.
func readKeyFile(path, key string, log *slog.Logger) ([]byte, error) {
	k, err := store.ReadKeyFile(path)
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", key, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o066 != 0 {
		log.Warn("encryption key file is readable or writable by group or others; make it owner-only (chmod 600)",
			"key", key, "file", path, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
	}
	return k, nil
}

// storeOpenError explains a store that did not open for lack of the
// right key to the operator.
func storeOpenError(dir string, err error) error {
	if errors.Is(err, store.ErrNotEncrypted) {
		return fmt.Errorf("node: open store %s: %w; encryption.key_file is set but the store was written without encryption: "+
			"stop here and encrypt the existing store first with 'trident --data-dir DIR --rotate-encryption-key KEYFILE' "+
			"(encryption.key_file unset), then start with encryption.key_file set to KEYFILE", dir, err)
	}
	return fmt.Errorf("node: open store %s: %w", dir, err)
}

// openAudit opens the audit sink named by audit.file; the node closes it.
func (n *Node) openAudit() error {
	l, c, err := auth.OpenAudit(n.cfg.Audit.File)
	if err != nil {
		return fmt.Errorf("node: audit.file: %w", err)
	}
	n.audit, n.auditCloser = l, c
	return nil
}

// authOptions returns the user database's options from the config.
func (n *Node) authOptions() auth.Options {
	cfg := n.cfg
	return auth.Options{
		DefaultUser:        cfg.DefaultUser,
		DefaultPass:        cfg.DefaultPass,
		DefaultVHost:       cfg.DefaultVHost,
		LoopbackUsers:      cfg.LoopbackUsers,
		FailedLoginLimit:   cfg.Auth.FailedLoginLimit,
		FailedLoginBackoff: cfg.Auth.FailedLoginBackoff,
		Log:                n.log.With("component", "auth"),
		Audit:              n.audit,
		OAuth2:             n.oauth,
		Backends:           cfg.Auth.Backends,
	}
}

// RotateEncryptionKey rewrites the store in cfg.DataDir, and a cluster
// member's Raft DB and snapshots, from the key in
// encryption.key_file (none when empty: it encrypts a plain store) into a
// fresh store encrypted with the key in encryption.rotate_to (trident
// --rotate-encryption-key NEWKEYFILE), crash-safely (store/rewrite.go).
// The node must not be running. Afterwards start with
// encryption.key_file set to the new file; neither the old key nor a
// copy of the old key registry reads anything of the store.
func RotateEncryptionKey(cfg conf.Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var oldKey []byte
	if cfg.Encryption.KeyFile != "" {
		k, err := readKeyFile(cfg.Encryption.KeyFile, "encryption.key_file", log)
		if err != nil {
			return err
		}
		oldKey = k
	}
	newKey, err := readKeyFile(cfg.Encryption.RotateTo, "encryption.rotate_to", log)
	if err != nil {
		return err
	}
	dir := filepath.Join(cfg.DataDir, storeDir)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("node: no store to rotate: %w", err)
	}
	if err := store.RotateEncryptionKey(dir, oldKey, newKey, log.With("component", "store")); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	// A cluster member's Raft DB and snapshots (raft.go) too: run again
	// after a failure, what the new key already opens is left as it is.
	if rdir := raftDir(cfg.DataDir); pathExists(filepath.Dir(rdir)) {
		if err := raftstore.RotateEncryptionKey(rdir, raftSnapshotDir(cfg.DataDir), oldKey, newKey, log.With("component", "raftstore")); err != nil {
			return fmt.Errorf("node: raft store: %w", err)
		}
	}
	return nil
}

func pathExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
