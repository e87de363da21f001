// Package sched holds messages until they fall due: the store-backed
// delay queue behind delayed exchanges (x-delayed-message) and queue
// retries with back-off (x-retry-delays). A Delayer keeps its messages in
// a store keyspace of their own keyed by due time (Key, Due), so that a
// key scan is a scan in due order, and keeps in memory only a window of
// the earliest-due ones, read ahead from the store as the window drains:
// a million held messages cost the window, not a million timers or
// bodies. It knows neither messages nor exchanges: the core
// (exchange/delayed.go, retry.go) encodes what it holds, decodes it
// (Config.Decode) and routes it when due (Config.Route).
//
// # Guarantees
//
//   - A message is appended to the store before it enters the window and
//     deleted from the store only after Route returned for it: a crash in
//     between routes it again after Recover (at least once), never loses
//     it. Stop(false) leaves what it holds in the store for the next
//     start; Stop(true) drops it.
//   - Route is called in due order (up to messages due in the same
//     millisecond), never before a message is due (due times are rounded
//     up to the millisecond), each message once per start.
//   - The window holds at most WindowMsgs messages (and 16 MiB).
//
// # Locks
//
// Delayer.mu guards the window; the owner's locks may be held when it is
// taken (the core schedules a retry under Queue.mu, starts and stops a
// delayed exchange's Delayer under VHost.mu), so under it the Delayer
// calls nothing of the owner's and never waits for the store. Route, Decode,
// Keep, Dropped and the store's reads run with no lock of the Delayer's
// held: Route may publish, taking the owner's locks. Schedule appends to
// the store (queued; it may wait for the store's back-pressure, so a
// caller holding its own lock waits with it) before it takes mu.
package sched
