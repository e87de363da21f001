//go:build !linux

package mqtt

import (
	"errors"
	"syscall"
)

// poller is Linux's (poller_linux.go); elsewhere every connection keeps
// its reader goroutine.
type poller struct{}

func newPoller() (*poller, error)  { return nil, errors.New("mqtt: no event loop on this system") }
func (p *poller) add(*conn) uint64 { return 0 }
func (p *poller) forget(uint64)    {}
func (p *poller) arm(*conn, syscall.RawConn) error {
	return errors.New("mqtt: no event loop on this system")
}
func (p *poller) close() {}
