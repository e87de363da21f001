package node

import (
	"fmt"
	"log/slog"

	"github.com/trident-broker/trident/cluster/cookie"
	"github.com/trident-broker/trident/conf"
)

// clusterCookie is the cookie the mux proves to peers: cluster.cookie, or
// the one in cluster.cookie_file (<data_dir>/cluster.cookie by default),
// generated there on the first start, as RabbitMQ's Erlang cookie.
func clusterCookie(c conf.Cluster, dataDir string, log *slog.Logger) (string, error) {
	if c.Cookie != "" {
		return c.Cookie, nil
	}
	path := c.CookieFilePath(dataDir)
	r, err := cookie.Load(path)
	if err != nil {
		return "", fmt.Errorf("node: cluster.cookie_file: %w", err)
	}
	if r.Created {
		log.Warn("cluster: generated a new cluster cookie; every node of the cluster needs the same one: copy this file to the other nodes, or set cluster.cookie_file or cluster.cookie on every node",
			"cookie_file", path)
	} else {
		log.Info("cluster: cookie read from its file", "cookie_file", path)
	}
	if r.TooOpen() {
		log.Warn("cluster: the cookie file is readable by group or others: anyone who reads it can join the cluster; chmod 600 it",
			"cookie_file", path, "mode", r.Mode.String())
	}
	return r.Cookie, nil
}
