package node

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/store"
)

// storeOptions returns the store's options: encrypted with the key in
// encryption.key_file when set.
func storeOptions(cfg conf.Config) (store.BadgerOptions, error) {
	var o store.BadgerOptions
	if cfg.Encryption.KeyFile != "" {
		k, err := store.ReadKeyFile(cfg.Encryption.KeyFile)
		if err != nil {
			return o, fmt.Errorf("node: encryption.key_file: %w", err)
		}
		o.EncryptionKey = k
	}
	return o, nil
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

// RotateEncryptionKey re-encrypts the store in cfg.DataDir from the key in
// encryption.key_file (none when empty) to the key in encryption.rotate_to
// (trident --rotate-encryption-key NEWKEYFILE). The node must not be
// running. Afterwards start with encryption.key_file set to the new file;
// the old key no longer opens the store.
func RotateEncryptionKey(cfg conf.Config) error {
	var oldKey []byte
	if cfg.Encryption.KeyFile != "" {
		k, err := store.ReadKeyFile(cfg.Encryption.KeyFile)
		if err != nil {
			return fmt.Errorf("node: encryption.key_file: %w", err)
		}
		oldKey = k
	}
	newKey, err := store.ReadKeyFile(cfg.Encryption.RotateTo)
	if err != nil {
		return fmt.Errorf("node: encryption.rotate_to: %w", err)
	}
	dir := filepath.Join(cfg.DataDir, storeDir)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("node: no store to rotate: %w", err)
	}
	if err := store.RotateEncryptionKey(dir, oldKey, newKey); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}
