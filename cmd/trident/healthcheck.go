package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/trident-broker/trident/conf"
)

// healthcheck runs "trident healthcheck [--url URL] [--timeout D] [CHECK ...]":
// it GETs /api/health/checks/CHECK of a running node for each CHECK
// (virtual-hosts when none is named) and returns 0 when every one answers
// 200, else 1. It is the image's HEALTHCHECK: a scratch image has no curl.
//
// The node is found the way the broker finds its settings (the file named
// by TRIDENT_CONFIG and TRIDENT_* variables): http.listen on loopback for
// a wildcard host, and default_user / default_pass as the credentials.
// --url (or TRIDENT_URL) and TRIDENT_USER / TRIDENT_PASSWORD, the
// variables tridentctl reads, win over them.
func healthcheck(args []string, stdout, stderr io.Writer, env func(string) string) int {
	fs := flag.NewFlagSet("trident healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", env("TRIDENT_URL"), "management API base URL (empty: from http.listen)")
	timeout := fs.Duration("timeout", 5*time.Second, "time allowed for each check")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: trident healthcheck [--url URL] [--timeout D] [CHECK ...]\n"+
			"CHECK is a path under /api/health/checks/, e.g. alarms, virtual-hosts, protocol-listener/amqp,\n"+
			"port-listener/5672 (default: virtual-hosts). Exit 0 when every check answers 200, else 1.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 1 // Docker reserves exit code 2
	}
	checks := fs.Args()
	if len(checks) == 0 {
		checks = []string{"virtual-hosts"}
	}
	for _, c := range checks {
		if !checkName.MatchString(c) || strings.Contains(c, "//") {
			fmt.Fprintf(stderr, "trident healthcheck: %q is not a health check name\n", c)
			return 1
		}
	}
	cfg, err := conf.Load(nil, env)
	if err != nil {
		fmt.Fprintf(stderr, "trident healthcheck: the node's configuration: %v; using the defaults\n", err)
		cfg = conf.Default()
	}
	user, pass := cfg.DefaultUser, cfg.DefaultPass
	if u := env("TRIDENT_USER"); u != "" {
		user, pass = u, env("TRIDENT_PASSWORD")
	}
	if *base == "" {
		u, err := loopbackURL(cfg.HTTP.Listen)
		if err != nil {
			fmt.Fprintf(stderr, "trident healthcheck: %v; name the API with --url\n", err)
			return 1
		}
		*base = u
	}
	client := &http.Client{Timeout: *timeout}
	for _, c := range checks {
		if err := check(client, strings.TrimRight(*base, "/")+"/api/health/checks/"+c, user, pass); err != nil {
			fmt.Fprintf(stderr, "trident healthcheck: %s: %v\n", c, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok\n", c)
	}
	return 0
}

// checkName is what a health check path may hold: RabbitMQ's names,
// protocol names (http/web-mqtt, amqp/ssl) and port numbers.
var checkName = regexp.MustCompile(`^[a-z0-9][a-z0-9/-]*$`)

// loopbackURL returns the API's URL for http.listen: a wildcard or empty
// host becomes 127.0.0.1.
func loopbackURL(listen string) (string, error) {
	if listen == "" {
		return "", fmt.Errorf("http.listen is off")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("http.listen %q: %v", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// check GETs one health check; nil when it answers 200.
func check(client *http.Client, url, user, pass string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(user, pass)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}
