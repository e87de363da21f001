package featureflags

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Set is the flags enabled in this node's cluster. The zero value is not
// usable: NewSet.
type Set struct {
	mu sync.RWMutex
	on map[string]bool
}

// NewSet returns a Set with the required flags enabled.
func NewSet() *Set {
	s := &Set{on: map[string]bool{}}
	for _, f := range registry {
		if f.Stability == Required {
			s.on[f.Name] = true
		}
	}
	return s
}

// Enabled reports whether the flag named name is enabled.
func (s *Set) Enabled(name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.on[name]
}

// Require returns ErrDisabled, naming the flag, unless it is enabled: what
// a writer asks before it uses the kind or version the flag gates.
func (s *Set) Require(name string) error {
	if s.Enabled(name) {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrDisabled, name)
}

// Enable marks name enabled (applied from the metadata group).
func (s *Set) Enable(name string) {
	s.mu.Lock()
	s.on[name] = true
	s.mu.Unlock()
}

// Names returns the enabled flags, sorted.
func (s *Set) Names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.on))
	for n := range s.on {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Missing returns the enabled flags that supported lacks, sorted: a
// member that lacks any cannot read what the cluster writes.
func (s *Set) Missing(supported map[string]bool) []string {
	var out []string
	for _, n := range s.Names() {
		if !supported[n] {
			out = append(out, n)
		}
	}
	return out
}

// States of a flag, as RabbitMQ's management API shows them.
const (
	StateEnabled     = "enabled"
	StateDisabled    = "disabled"
	StateUnavailable = "unavailable" // some member does not support it
)

// Status is one flag as the API lists it.
type Status struct {
	Flag
	State string
	// Missing lists the members that do not support the flag (or are
	// not running), when it is not enabled.
	Missing []string
}

// Report returns every flag of the registry with its state: enabled if s
// has it; else unavailable if a member in missing (flag → members that
// do not support it) lacks it; else disabled.
func Report(s *Set, missing map[string][]string) []Status {
	out := make([]Status, 0, len(registry))
	for _, f := range registry {
		st := Status{Flag: f, State: StateDisabled}
		switch {
		case s.Enabled(f.Name):
			st.State = StateEnabled
		case len(missing[f.Name]) > 0:
			st.State = StateUnavailable
			st.Missing = slices.Sorted(slices.Values(missing[f.Name]))
		}
		out = append(out, st)
	}
	return out
}

// UnsupportedError names the members that keep a flag from being enabled.
type UnsupportedError struct {
	Flag    string
	Members []string // "node (reason)"
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("feature flag %s cannot be enabled: not supported by every member of the cluster: %s (upgrade them, or start them, then enable it)",
		e.Flag, strings.Join(e.Members, ", "))
}

// Unwrap returns ErrUnsupported.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }
