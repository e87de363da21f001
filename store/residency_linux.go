package store

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Badger maps its value-log files into memory and writes and reads message
// bodies through the mapping, so every body written or read stays counted
// in the process's resident size (as file-backed pages) until the kernel
// needs the memory. trimMapped tells the kernel to page those mappings out
// (MADV_PAGEOUT, a hint that never changes what memory holds: clean pages
// are dropped and read again from the file if touched, dirty ones are
// written back first), so that the broker's resident size shows its own
// memory, not a page cache of its backlog. It only touches mappings of
// value-log files under dir, as /proc/self/maps lists them.
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
		if !bytes.HasPrefix(path, prefix) || !bytes.HasSuffix(path, []byte(".vlog")) {
			continue
		}
		rng, _, _ := bytes.Cut(line, []byte(" "))
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
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT)
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
