package mqtt

import (
	"testing"
	"unsafe"
)

func TestZZSizes(t *testing.T) {
	t.Logf("conn %d packetWriter %d session %d subscription %d outItem %d pidTable %d",
		unsafe.Sizeof(conn{}), unsafe.Sizeof(packetWriter{}), unsafe.Sizeof(session{}), unsafe.Sizeof(subscription{}), unsafe.Sizeof(outItem{}), unsafe.Sizeof(pidTable{}))
}
