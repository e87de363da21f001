// Command tridentctl is Trident's operator CLI. It is a client of the
// management HTTP API only (RabbitMQ's /api shapes), so it also works
// against RabbitMQ.
//
//	tridentctl [global flags] COMMAND [ARGS] [flags]
//	tridentctl --version
//
// "tridentctl help" lists the commands, "tridentctl help COMMAND" (or
// "tridentctl COMMAND --help") prints one command's usage and flags; the
// table in commands.go is where both come from.
//
// Global flags may come before or after the command: --url, --vhost,
// --format table|json, --token, --all-vhosts; --user and --password only
// before it (declare user and declare permission have their own). They
// also come from TRIDENT_URL, TRIDENT_USER, TRIDENT_PASSWORD,
// TRIDENT_TOKEN (an OAuth 2 access token, sent as Bearer) and
// TRIDENT_VHOST.
package main

import (
	"fmt"
	"os"

	"github.com/trident-broker/trident/cmd/internal/version"
)

func main() {
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.String("tridentctl"))
		os.Exit(0)
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

func envOr(env func(string) string, k, def string) string {
	if v := env(k); v != "" {
		return v
	}
	return def
}
