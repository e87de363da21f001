package frontend

import (
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trident-broker/trident/exchange"
)

// TestReadMeter counts the bytes read and stamps the reads that returned
// some; an idle batch is left alone.
func TestReadMeter(t *testing.T) {
	var last atomic.Int64
	var n atomic.Uint64
	var b exchange.Batch
	m := ReadMeter{R: strings.NewReader("hello, world"), Batch: &b, LastRead: &last, Bytes: &n}
	buf := make([]byte, 5)
	if k, err := m.Read(buf); k != 5 || err != nil || n.Load() != 5 || last.Load() == 0 {
		t.Fatalf("read %d, %v: counted %d, last read %d", k, err, n.Load(), last.Load())
	}
	before := last.Load()
	if _, err := io.ReadAll(m); err != nil || n.Load() != 12 {
		t.Fatalf("after reading everything: %v, counted %d, want 12", err, n.Load())
	}
	if last.Load() < before {
		t.Fatalf("last read went back: %d < %d", last.Load(), before)
	}
}
