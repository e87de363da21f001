package stomp

import (
	"strings"
)

// destKind is the type of a STOMP destination, as RabbitMQ defines them.
type destKind uint8

const (
	destQueue      destKind = iota + 1 // /queue/name: declared, default exchange
	destTopic                          // /topic/key: amq.topic
	destAMQQueue                       // /amq/queue/name: existing queue, no declare
	destTempQueue                      // /temp-queue/name: private reply queue
	destReplyQueue                     // /reply-queue/name: a temp queue by its real name
	destExchange                       // /exchange/name[/pattern]
)

const (
	prefixQueue      = "/queue"
	prefixTopic      = "/topic"
	prefixAMQQueue   = "/amq/queue"
	prefixTempQueue  = "/temp-queue"
	prefixReplyQueue = "/reply-queue/"
	prefixExchange   = "/exchange"
	topicExchange    = "amq.topic"
)

var destTypeNames = map[destKind]string{destQueue: "queue", destTopic: "topic", destAMQQueue: "amqqueue",
	destTempQueue: "temp_queue", destExchange: "exchange"}

// destination is a parsed destination header.
type destination struct {
	kind    destKind
	name    string // queue name, routing key (topic), temp-queue id, or exchange name
	pattern string // /exchange/name/pattern
}

// parseDestination parses a destination header as RabbitMQ does.
func parseDestination(s string) (destination, *Error) {
	simple := func(kind destKind, rest string) (destination, *Error) {
		parts := splitContent(rest)
		if len(parts) != 1 || parts[0] == "" {
			return destination{}, errorf("Invalid destination", "'%s' is not a valid %s destination\n", rest, destTypeNames[kind])
		}
		return destination{kind: kind, name: parts[0]}, nil
	}
	switch {
	case strings.HasPrefix(s, prefixReplyQueue):
		name := s[len(prefixReplyQueue):] // reply queue names may hold slashes
		if name == "" {
			return destination{}, errorf("Invalid destination", "'%s' is not a valid reply_queue destination\n", s)
		}
		return destination{kind: destReplyQueue, name: name}, nil
	case strings.HasPrefix(s, prefixAMQQueue+"/"):
		return simple(destAMQQueue, s[len(prefixAMQQueue):])
	case strings.HasPrefix(s, prefixQueue+"/"):
		return simple(destQueue, s[len(prefixQueue):])
	case strings.HasPrefix(s, prefixTopic+"/"):
		return simple(destTopic, s[len(prefixTopic):])
	case strings.HasPrefix(s, prefixTempQueue+"/"):
		return simple(destTempQueue, s[len(prefixTempQueue):])
	case strings.HasPrefix(s, prefixExchange+"/"):
		rest := s[len(prefixExchange):]
		parts := splitContent(rest)
		switch {
		case len(parts) == 0 || parts[0] == "" || len(parts) > 2:
			// The default exchange cannot be named this way: it means
			// different things for SEND and SUBSCRIBE.
			return destination{}, errorf("Invalid destination", "'%s' is not a valid exchange destination\n", rest)
		case len(parts) == 1:
			return destination{kind: destExchange, name: parts[0]}, nil
		default:
			return destination{kind: destExchange, name: parts[0], pattern: parts[1]}, nil
		}
	}
	return destination{}, errorf("Unknown destination", "'%s' is not a valid destination.\n"+
		"Valid destination types are: /temp-queue, /exchange, /topic, /queue, /amq/queue, /reply-queue/.\n", s)
}

// splitContent drops one leading slash, splits on "/" and unescapes %2F.
func splitContent(s string) []string {
	s = strings.TrimPrefix(s, "/")
	if s == "" {
		return nil
	}
	parts := strings.Split(s, "/")
	for i, p := range parts {
		parts[i] = unescapeDest(p)
	}
	return parts
}

func unescapeDest(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if h, ok := unhex2(s[i+1], s[i+2]); ok {
				sb.WriteByte(h)
				i += 2
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

func unhex2(a, b byte) (byte, bool) {
	x, ok1 := unhex(a)
	y, ok2 := unhex(b)
	return x<<4 | y, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// route is where a SEND to d goes.
func (d destination) route() (exchangeName, key string) {
	switch d.kind {
	case destTopic:
		return topicExchange, d.name
	case destExchange:
		return d.name, d.pattern
	default: // queue, amq/queue, reply-queue
		return "", d.name
	}
}

// formatDestination is the destination header of a MESSAGE, from the
// exchange and routing key it was published with (RabbitMQ's format).
func formatDestination(x, key string) string {
	switch {
	case x == "":
		return prefixQueue + "/" + escapeDest(key)
	case x == topicExchange:
		return prefixTopic + "/" + escapeDest(key)
	case key == "":
		return prefixExchange + "/" + escapeDest(x)
	}
	return prefixExchange + "/" + escapeDest(x) + "/" + escapeDest(key)
}

func escapeDest(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '/' || c == '%' || c < 32 || c > 127 {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '/' || c == '%' || c < 32 || c > 127 {
			sb.WriteByte('%')
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&15])
		} else {
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

// hasDestPrefix reports whether s is a STOMP destination rather than a
// bare queue name (for reply-to headers).
func hasDestPrefix(s string) bool {
	for _, p := range []string{prefixQueue + "/", prefixTopic + "/", prefixAMQQueue + "/", prefixTempQueue + "/",
		prefixReplyQueue, prefixExchange + "/"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
