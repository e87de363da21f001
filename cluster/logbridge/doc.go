// Package logbridge forwards the loggers of the cluster's engines into
// Trident's *slog.Logger: memberlist's *log.Logger (NewStdLogger) and
// hashicorp/raft's hclog.Logger (NewHCLogger). Nothing is printed on its own;
// everything goes to the slog handler the node was built with.
package logbridge
