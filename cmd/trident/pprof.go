package main

import (
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on the default mux
	"os"
	"strings"
)

// startPprof serves net/http/pprof on $TRIDENT_PPROF (e.g. 127.0.0.1:6060)
// when it is set: profiling a running broker is how we find what to optimise.
func startPprof(log *slog.Logger) {
	addr := os.Getenv("TRIDENT_PPROF")
	if addr == "" {
		return
	}
	// A comma-separated list: the first address free is taken (several
	// processes of one test share the variable).
	for _, a := range strings.Split(addr, ",") {
		l, err := net.Listen("tcp", a)
		if err != nil {
			continue
		}
		log.Info("pprof listening", "addr", a)
		go func() {
			if err := http.Serve(l, nil); err != nil {
				log.Error("pprof stopped", "err", err)
			}
		}()
		return
	}
	log.Error("pprof: no address free", "addrs", addr)
}
