package store

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Badger maps its value-log files (and its memtables' logs) into memory and
// writes and reads message bodies through the mappings, so every body
// written or read stays counted in the process's resident size (as
// file-backed pages) until the kernel needs the memory. trimMapped drops
// those pages from the process's mappings (MADV_DONTNEED on a shared file
// mapping: the pages stay in the page cache, dirty ones still to be
// written back, and a later access maps them again with a minor fault;
// nothing is written or read for it, unlike MADV_PAGEOUT, which wrote
// back and evicted them and cost a fill or a drain 10-15% when run every
// second), so that the broker's resident size shows its own memory, not a
// page cache of its backlog or of a stream its readers read. It only
// touches shared or read-only mappings of value-log and memtable files
// under dir, as /proc/self/maps lists them: dropping a private written
// page would lose it.
func trimMapped(dir string) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	prefix := []byte(abs + "/")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		// start-end perms offset dev inode path
		i := bytes.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		path := line[i:]
		if !bytes.HasPrefix(path, prefix) || !(bytes.HasSuffix(path, []byte(".vlog")) || bytes.HasSuffix(path, []byte(".mem"))) {
			continue
		}
		rng, rest, _ := bytes.Cut(line, []byte(" "))
		if perms, _, _ := bytes.Cut(rest, []byte(" ")); len(perms) < 4 || (perms[3] != 's' && perms[1] == 'w') {
			continue // private and writable: its written pages are its own
		}
		lo, hi, ok := bytes.Cut(rng, []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		// The raw call: the range is Badger's mapping, never touched here.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED)
	}
}

// residentFileBytes is the process's resident file-backed memory
// (RssFile), 0 if unknown.
func residentFileBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	i := bytes.Index(b, []byte("RssFile:"))
	if i < 0 {
		return 0
	}
	line, _, _ := bytes.Cut(b[i+len("RssFile:"):], []byte("\n"))
	kb, _ := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(line), []byte(" kB"))), 10, 64)
	return kb << 10
}
