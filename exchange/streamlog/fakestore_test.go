package streamlog

import "github.com/trident-broker/trident/exchange/internal/memstore"

// fakeStore is the in-memory store the log's tests run on: the core's
// test store (exchange/internal/memstore), which implements Store and
// MessageLog.
type fakeStore = memstore.Store

var _ Store = (*fakeStore)(nil)
var _ MessageLog = (*fakeStore)(nil)

func newFakeStore() *fakeStore { return memstore.New() }
