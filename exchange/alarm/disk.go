package alarm

import (
	"syscall"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// diskFree returns the bytes available to an unprivileged user on the file
// system holding dir.
func diskFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// WatchDisk raises and clears the broker's "disk" alarm every interval
// until stop is closed: raised while dir's file system has less than limit
// bytes free (RabbitMQ's disk_free_limit), cleared once it has limit plus
// a margin (5% of the limit, at least 1 MiB) free again, so that it does
// not flap. An error reading the free space leaves the alarm as it is.
func WatchDisk(alarms *exchange.Alarms, dir string, limit int64, interval time.Duration, stop <-chan struct{}, log Logger) {
	margin := max(limit/20, 1<<20)
	t := time.NewTicker(interval)
	defer t.Stop()
	raised := false
	for {
		free, err := diskFree(dir)
		switch {
		case err != nil:
			log.Warn("disk free space unknown", "dir", dir, "err", err)
		case !raised && free < limit:
			raised = true
			log.Warn("disk alarm raised: publishers are blocked", "free", free, "limit", limit)
			alarms.Set("disk", true)
		case raised && free >= limit+margin:
			raised = false
			log.Warn("disk alarm cleared", "free", free, "limit", limit)
			alarms.Set("disk", false)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
