// Package memstore is the in-memory store the tests of exchange and its
// packages run the core on: one fake of the byte-oriented store
// (exchange.Store, and the subset exchange/streamlog needs), with the
// knobs and counters those tests look at. It imports only the standard
// library, and only tests import it: it is internal to exchange, and no
// non-test file of the broker uses it.
//
// Locks: Store.Mu guards every field; no callback (done, LoadMeta's and
// the readers' fn) runs holding it.
package memstore
