package main

import (
	"fmt"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on the default mux
	"os"
)

// startPprof serves net/http/pprof on $TRIDENTBENCH_PPROF (host:port) when
// it is set: the load generator's own profile and execution trace tell
// what of a latency or a rate is the client's.
func startPprof() {
	addr := os.Getenv("TRIDENTBENCH_PPROF")
	if addr == "" {
		return
	}
	go func() {
		if err := http.ListenAndServe(addr, nil); err != nil {
			fmt.Fprintln(os.Stderr, "tridentbench: pprof:", err)
		}
	}()
}
