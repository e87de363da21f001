package store

import "errors"

// ErrClosed is returned (or passed to a done callback) by every operation
// issued after Close.
var ErrClosed = errors.New("store: closed")

// Stats counts the work of a group-committing store since it was opened.
type Stats struct {
	Appends   uint64 // appends whose done callback was called with nil
	Deletes   uint64 // message deletes issued
	Cancelled uint64 // appends deleted before they were written: neither reached the disk
	Batches   uint64 // group commits (batches taken by the writer)
	Syncs     uint64 // fsyncs issued by the writer
}
