package quorum

import "github.com/trident-broker/trident/exchange"

// The Log is what the core's quorum queue keeps its messages in.
var (
	_ exchange.MessageLog = (*Log)(nil)
	_ exchange.ReturnLog  = (*Log)(nil)
	_ exchange.CommitLog  = (*Log)(nil)
)
