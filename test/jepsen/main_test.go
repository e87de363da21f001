package jepsen

import (
	"testing"

	"github.com/trident-broker/trident/test/testbin"
)

// TestMain removes the trident build the tests shared when they end.
func TestMain(m *testing.M) { testbin.Main(m) }
