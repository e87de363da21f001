package web

import (
	"errors"
	"testing"
	"time"
)

var expiryWindowCases = []struct {
	within, unit string
	want         time.Duration
	err          error
}{
	{"1", "days", 24 * time.Hour, nil},
	{"2", "WEEKS", 14 * 24 * time.Hour, nil},
	{"12", "months", 365 * 24 * time.Hour, nil},
	{"1", "years", 365 * 24 * time.Hour, nil},
	{"0", "days", 0, nil},
	{"-3", "days", -72 * time.Hour, nil},
	{"+3", "days", 72 * time.Hour, nil},
	{"999999999999999999999", "years", maxExpiryWindow, nil},
	{"-999999999999999999999", "years", -maxExpiryWindow, nil},
	{"9223372036854775807", "days", maxExpiryWindow, nil},
	{"x", "days", 0, errExpiryValue},
	{"", "days", 0, errExpiryValue},
	{"1.5", "days", 0, errExpiryValue},
	{"1", "hours", 0, errExpiryUnit},
	{"1", "", 0, errExpiryUnit},
	{"x", "fortnights", 0, errExpiryValue},
}

func TestParseExpiryWindow(t *testing.T) {
	for _, c := range expiryWindowCases {
		got, err := parseExpiryWindow(c.within, c.unit)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("parseExpiryWindow(%q, %q) = %v, %v; want %v, %v", c.within, c.unit, got, err, c.want, c.err)
		}
	}
}

// FuzzExpiryWindow: any path segments give a window within the bounds or
// one of the two errors, never a panic.
func FuzzExpiryWindow(f *testing.F) {
	for _, c := range expiryWindowCases {
		f.Add(c.within, c.unit)
	}
	f.Fuzz(func(t *testing.T, within, unit string) {
		d, err := parseExpiryWindow(within, unit)
		if err != nil {
			if !errors.Is(err, errExpiryValue) && !errors.Is(err, errExpiryUnit) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if d > maxExpiryWindow || d < -maxExpiryWindow {
			t.Fatalf("window %v out of bounds", d)
		}
	})
}

func TestListenerProtocol(t *testing.T) {
	for in, want := range map[string]string{
		"amqp": "amqp", "AMQP091": "amqp", "amqp0_9_1": "amqp", "amqps": "amqp/ssl", "amqp/ssl": "amqp/ssl",
		"mqtt3.1.1": "mqtt", "mqtt+ssl": "mqtt/ssl", "stomp12": "stomp", "stomp+tls": "stomp/ssl",
		"web-mqtt": "http/web-mqtt", "web_mqtt/ssl": "https/web-mqtt", "webstomp": "http/web-stomp",
		"web-stomp+ssl": "https/web-stomp", "ui": "http", "https": "https", "cli": "clustering",
		"distribution": "clustering", "prometheus": "http/prometheus", "prometheus+tls": "https/prometheus",
		"amqp10": "amqp10", "nosuch": "nosuch",
	} {
		if got := listenerProtocol(in); got != want {
			t.Errorf("listenerProtocol(%q) = %q, want %q", in, got, want)
		}
	}
}
