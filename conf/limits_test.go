package conf

import (
	"strings"
	"testing"
	"time"
)

func TestLimitsAndDiskAlarmConfig(t *testing.T) {
	d := Default()
	if d.DiskFreeLimit != 50_000_000 || d.DiskFreeCheckInterval <= 0 {
		t.Fatalf("disk alarm defaults: %d, %s; want RabbitMQ's 50 MB", d.DiskFreeLimit, d.DiskFreeCheckInterval)
	}
	if d.Limits != (Limits{}) {
		t.Fatalf("limits default to none, as RabbitMQ's: %+v", d.Limits)
	}
	env := map[string]string{"TRIDENT_LIMITS_PUBLISH_RATE_PER_VHOST": "500"}
	c, err := Load([]string{"--disk-free-limit", "1000", "--disk-free-check-interval", "250ms",
		"--limits-max-connections-per-user", "7", "--limits-max-queues-per-vhost", "9"},
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{MaxConnectionsPerUser: 7, MaxQueuesPerVHost: 9, PublishRatePerVHost: 500}
	if c.DiskFreeLimit != 1000 || c.DiskFreeCheckInterval != 250*time.Millisecond || c.Limits != want {
		t.Fatalf("loaded %d %s %+v", c.DiskFreeLimit, c.DiskFreeCheckInterval, c.Limits)
	}
	bad := Default()
	bad.DiskFreeLimit = -1
	bad.Limits.PublishRatePerUser = -2
	err = bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "disk_free_limit") || !strings.Contains(err.Error(), "limits.publish_rate_per_user") {
		t.Fatalf("Validate: %v", err)
	}
}
