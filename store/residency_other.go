//go:build !linux

package store

// trimMapped does nothing where /proc/self/maps and MADV_DONTNEED are not.
func trimMapped(string) {}

// residentFileBytes is unknown here.
func residentFileBytes() int64 { return 0 }
