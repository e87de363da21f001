//go:build !linux

package store

// trimMapped does nothing where MADV_PAGEOUT is not available.
func trimMapped(string) {}

// residentFileBytes is unknown here.
func residentFileBytes() int64 { return 0 }
