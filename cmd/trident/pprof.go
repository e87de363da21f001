package main

import (
	"log/slog"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on the default mux
	"os"
)

// startPprof serves net/http/pprof on $TRIDENT_PPROF (e.g. 127.0.0.1:6060)
// when it is set: profiling a running broker is how we find what to optimise.
func startPprof(log *slog.Logger) {
	addr := os.Getenv("TRIDENT_PPROF")
	if addr == "" {
		return
	}
	go func() {
		log.Info("pprof listening", "addr", addr)
		if err := http.ListenAndServe(addr, nil); err != nil {
			log.Error("pprof stopped", "err", err)
		}
	}()
}
