//go:build !linux

package store

// trimMapped does nothing where MADV_PAGEOUT is not available.
func trimMapped(string) {}
