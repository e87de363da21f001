// Command trident runs a Trident broker node.
//
//	trident [--config FILE] [--data-dir DIR] [--amqp-listen ADDR] ...
//	trident --version
//	trident healthcheck [--url URL] [CHECK ...]
//
// Run "trident -h" for every flag, its environment variable and YAML key.
// "trident healthcheck" asks a running node's health API (healthcheck.go).
// SIGINT or SIGTERM shuts down gracefully (clients are told; in a cluster
// the node then hands its Raft leaderships to other nodes, for at most 5
// of the seconds; the store is flushed) within 10 seconds; a second signal
// exits at once. SIGHUP
// re-reads the TLS certificate, key and CA files.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/trident-broker/trident/cmd/internal/version"
	"github.com/trident-broker/trident/cmd/trident/node"
	"github.com/trident-broker/trident/conf"
)

const shutdownTimeout = 10 * time.Second

func main() { os.Exit(run()) }

func run() int {
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.String("trident"))
		return 0
	}
	if len(os.Args) > 1 && os.Args[1] == "healthcheck" {
		return healthcheck(os.Args[2:], os.Stdout, os.Stderr, os.Getenv)
	}
	cfg, err := conf.Load(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		conf.Usage(os.Stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "trident: invalid configuration:\n%v\n(run 'trident -h' for the flags, environment variables and YAML keys)\n", err)
		return 2
	}
	log := newLogger(cfg.Log)
	log.Info("trident "+version.Version(), "version", version.Version(), "commit", version.Commit(), "go", version.GoVersion())
	if cfg.Encryption.RotateTo != "" {
		if err := node.RotateEncryptionKey(cfg, log); err != nil {
			log.Error("encryption key rotation failed", "err", err)
			return 1
		}
		log.Info("encryption key rotated; start with encryption.key_file set to the new key", "new_key_file", cfg.Encryption.RotateTo)
		return 0
	}

	// Registered before Start so that a signal during startup is not lost.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// SIGHUP re-reads the TLS certificate, key and CA files.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	startPprof(log)
	n, err := node.Start(cfg, log)
	if err != nil {
		log.Error("startup failed", "err", err)
		return 1
	}
	go func() {
		for range hup {
			if err := n.ReloadTLS(); err != nil {
				log.Error("TLS reload on SIGHUP failed; the previous certificate stays", "err", err)
			}
		}
	}()
	log.Info("trident started", "data_dir", cfg.DataDir, "default_vhost", cfg.DefaultVHost)
	if a := n.AMQPAddr(); a != nil {
		log.Info("listening", "protocol", "amqp", "addr", a.String())
	}

	<-ctx.Done()
	stop() // a second signal now kills the process
	log.Info("shutting down", "timeout", shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- n.Close(sctx) }()
	overrun := time.NewTimer(shutdownTimeout)
	defer overrun.Stop()
	select {
	case err := <-closed:
		closed <- err
	case <-overrun.C:
		// Say where it is stuck before giving up on it.
		log.Error("shutdown is overrunning its timeout; goroutines follow")
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
	}
	select {
	case err := <-closed:
		if err != nil {
			log.Error("shutdown", "err", err)
			return 1
		}
	case <-time.After(shutdownGrace):
		// A store that cannot flush (its disk failing or gone) must not
		// keep the process alive: what was confirmed is on disk already.
		log.Error("shutdown did not finish in time; exiting", "waited", (shutdownTimeout + shutdownGrace).String())
		return 1
	}
	log.Info("stopped")
	return 0
}

// shutdownGrace is how long past shutdownTimeout the process waits for
// the stores to close before it exits anyway.
const shutdownGrace = 5 * time.Second

// newLogger returns a text or JSON slog logger on stderr at the configured
// level.
func newLogger(c conf.Log) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.SlogLevel()}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
