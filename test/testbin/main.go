package testbin

import (
	"os"
	"sync"
	"testing"
)

// processTemp holds what this package creates once per test process (the
// shared binary's directory, the anonymous MQTT definitions file): Main
// removes it when the package's tests end.
var processTemp struct {
	mu    sync.Mutex
	paths []string
}

func keepUntilExit(path string) {
	processTemp.mu.Lock()
	processTemp.paths = append(processTemp.paths, path)
	processTemp.mu.Unlock()
}

// Main runs a test package that uses Start or AnonDefinitions and then
// removes the temporary files they made for the whole process (a build of
// trident is about 40 MB: left behind, every `go test` run would keep one).
// Call it from the package's TestMain:
//
//	func TestMain(m *testing.M) { testbin.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	removeProcessTemp()
	os.Exit(code)
}

func removeProcessTemp() {
	processTemp.mu.Lock()
	defer processTemp.mu.Unlock()
	for _, p := range processTemp.paths {
		os.RemoveAll(p)
	}
	processTemp.paths = nil
}
