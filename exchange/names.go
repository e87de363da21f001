package exchange

import (
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest queue, exchange or vhost name, in bytes (an
// AMQP short string, as RabbitMQ).
const MaxNameLen = 255

// checkName refuses a name no protocol could carry back: longer than
// MaxNameLen bytes, not valid UTF-8, or holding a NUL (which would also
// cut the name short in a store key). Every path that creates a queue,
// exchange or vhost asks it, whatever front end the name came from.
func checkName(kind, name string) error {
	switch {
	case len(name) > MaxNameLen:
		return errorf(KindPreconditionFailed, "%s name is %d bytes long, the maximum is %d", kind, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return errorf(KindPreconditionFailed, "%s name is not valid UTF-8", kind)
	case strings.IndexByte(name, 0) >= 0:
		return errorf(KindPreconditionFailed, "%s name contains a NUL character", kind)
	}
	return nil
}
