package mqtt

// EachCounters calls fn with the name and traffic counters of each
// connected connection, without describing it as Connections does (no
// addresses, no subscription list): what the management API's rate
// sampler reads of every connection every stats interval.
func (s *Server) EachCounters(fn func(name string, recvBytes, sentBytes, recvPublish, sentPublish uint64)) {
	for _, c := range s.conns.Snapshot() {
		if c.connected.Load() {
			fn(c.connName(), c.recvBytes.Load(), c.sentBytes.Load(), c.recvPublish.Load(), c.sentPublish.Load())
		}
	}
}
