// Command tridentctl is Trident's operator CLI. It is a client of the
// management HTTP API only (RabbitMQ's /api shapes), so it also works
// against RabbitMQ.
//
//	tridentctl [--url URL] [--user U] [--password P | --token T] [--vhost V] [--format table|json] COMMAND ...
//	tridentctl --version
//
// Commands:
//
//	overview
//	list queues|exchanges|bindings|connections|channels|consumers|users|vhosts|permissions
//	declare queue NAME [--durable] [--auto-delete] [--arg k=v ...]
//	declare exchange NAME [--type direct] [--durable] [--auto-delete] [--internal]
//	declare binding --source X --destination D [--destination-type queue|exchange] [--routing-key K]
//	declare user NAME [--password P | --password-hash H] [--tags a,b]
//	declare vhost NAME
//	declare permission --user U [--configure RE] [--write RE] [--read RE]
//	delete queue|exchange|user|vhost NAME
//	delete binding --source X --destination D [--destination-type queue|exchange] --properties-key K
//	delete permission --user U
//	purge queue NAME
//	close connection NAME [--reason TEXT]
//	publish --exchange X --routing-key K --payload TEXT
//	get --queue Q [--count N] [--ackmode ack_requeue_true|ack_requeue_false|reject_requeue_true|reject_requeue_false]
//	export FILE      (- for stdout)
//	import FILE      (- for stdin)
//
// Flags also come from TRIDENT_URL, TRIDENT_USER, TRIDENT_PASSWORD,
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
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

func envOr(env func(string) string, k, def string) string {
	if v := env(k); v != "" {
		return v
	}
	return def
}

func usage() string {
	return `usage: tridentctl [--url URL] [--user U] [--password P | --token T] [--vhost V] [--format table|json] COMMAND ...
       tridentctl --version
commands: overview | list KIND | declare KIND ... | delete KIND ... | purge queue NAME |
          close connection NAME | publish ... | get ... | export FILE | import FILE |
          forget_cluster_node NODE | rebalance quorum | check quorum-critical
run "tridentctl help" for the full list`
}
