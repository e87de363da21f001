package wire

import (
	"strings"
	"unicode/utf8"
)

// The mapping between MQTT topics and AMQP routing keys is RabbitMQ's: the
// level separator "/" becomes the word separator "." and a "." inside an
// MQTT level becomes "/", so the mapping is a bijection; in filters "+"
// becomes "*" and "#" stays "#".

// TopicToKey maps an MQTT topic name to a routing key.
func TopicToKey(topic string) string { return swapSep(topic) }

// KeyToTopic maps a routing key back to an MQTT topic name.
func KeyToTopic(key string) string { return swapSep(key) }

// FilterToKey maps an MQTT topic filter (without a $share prefix) to a
// topic-exchange binding key.
func FilterToKey(filter string) string {
	b := []byte(filter)
	for i, c := range b {
		switch c {
		case '/':
			b[i] = '.'
		case '.':
			b[i] = '/'
		case '+':
			b[i] = '*'
		}
	}
	return string(b)
}

func swapSep(s string) string {
	if strings.IndexByte(s, '/') < 0 && strings.IndexByte(s, '.') < 0 {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		switch c {
		case '/':
			b[i] = '.'
		case '.':
			b[i] = '/'
		}
	}
	return string(b)
}

// ValidTopic reports whether name is a valid topic name for PUBLISH:
// non-empty UTF-8 without wildcards or NUL, at most 65535 bytes.
func ValidTopic(name string) bool {
	return name != "" && len(name) <= 65535 && utf8.ValidString(name) &&
		!strings.ContainsAny(name, "+#\x00")
}

// ValidFilter reports whether filter is a valid topic filter: "#" only as
// the last level, "+" and "#" only as whole levels.
func ValidFilter(filter string) bool {
	if filter == "" || len(filter) > 65535 || !utf8.ValidString(filter) || strings.IndexByte(filter, 0) >= 0 {
		return false
	}
	levels := strings.Split(filter, "/")
	for i, l := range levels {
		if strings.ContainsAny(l, "+#") && len(l) != 1 {
			return false
		}
		if l == "#" && i != len(levels)-1 {
			return false
		}
	}
	return true
}

// SharedFilter splits "$share/group/filter" into group and filter; ok is
// false for a filter that is not a shared subscription. A shared filter with
// an empty or wildcard group name, or no filter, is invalid: valid is false.
func SharedFilter(f string) (group, filter string, ok, valid bool) {
	rest, found := strings.CutPrefix(f, "$share/")
	if !found {
		return "", f, false, true
	}
	group, filter, found = strings.Cut(rest, "/")
	if !found || group == "" || strings.ContainsAny(group, "+#") || !ValidFilter(filter) {
		return group, filter, true, false
	}
	return group, filter, true, true
}

// Match reports whether topic matches filter, with MQTT's rule that a
// filter starting with a wildcard does not match a topic starting with "$".
func Match(filter, topic string) bool {
	if topic != "" && topic[0] == '$' && filter != "" && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		if !fmore || !tmore {
			// "a/#" matches "a" too.
			return fmore == tmore || (!tmore && frest == "#")
		}
		filter, topic = frest, trest
	}
}

// Within reports whether every topic that filter matches is matched by
// outer too (both valid filters): "a/+/c" is within "a/#" and "a/+/+",
// "a/#" within "a/#" and "#", but "#" is not within "a/#".
func Within(filter, outer string) bool {
	f, o := strings.Split(filter, "/"), strings.Split(outer, "/")
	for i, ol := range o {
		if ol == "#" {
			return true // matches the parent level and everything below
		}
		if i == len(f) {
			return false
		}
		switch fl := f[i]; {
		case fl == "#":
			return false // more levels than outer allows
		case ol == "+":
		case fl != ol: // a literal level must be the same ("+" is wider)
			return false
		}
	}
	return len(f) == len(o)
}
