package mqtt

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// TestBrowseRetainedPages: paging through BrowseRetained, by Skip and by
// the cursor, gives exactly the matching live topics of the asked vhosts
// in (vhost, topic) order, whatever the page size; the bounded heap is
// checked against sorting everything.
func TestBrowseRetainedPages(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	r, _ := loadRetained(st)
	s := &Server{retained: r, st: st, shared: st}
	rng := rand.New(rand.NewSource(1))
	type vt struct{ vh, topic string }
	var all []vt
	seen := map[vt]bool{}
	words := []string{"a", "b", "c", "x", "dev", "$SYS"}
	for len(all) < 1500 {
		n := 1 + rng.Intn(4)
		levels := make([]string, n)
		for i := range levels {
			levels[i] = words[rng.Intn(len(words))]
			if i > 0 && levels[i] == "$SYS" {
				levels[i] = "s"
			}
			if rng.Intn(3) == 0 {
				levels[i] += fmt.Sprint(rng.Intn(20))
			}
		}
		e := vt{[]string{"/", "v2", "v3"}[rng.Intn(3)], strings.Join(levels, "/")}
		if seen[e] {
			continue
		}
		seen[e] = true
		all = append(all, e)
		if err := r.put(st, e.vh, retainedPub(e.topic, "p:"+e.topic)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		vhosts []string
		filter string
	}{{nil, "#"}, {[]string{"/"}, "a/#"}, {[]string{"v2", "/"}, "+/b/+"}, {nil, "$SYS/#"}, {[]string{"v3"}, "x"}, {nil, "nothing/here"}} {
		var want []vt
		for _, e := range all {
			if (c.vhosts == nil || slices.Contains(c.vhosts, e.vh)) && wire.Match(c.filter, e.topic) {
				want = append(want, e)
			}
		}
		slices.SortFunc(want, func(a, b vt) int {
			if x := strings.Compare(a.vh, b.vh); x != 0 {
				return x
			}
			return strings.Compare(a.topic, b.topic)
		})
		for _, size := range []int{1, 7, 100, 2000} {
			name := fmt.Sprintf("%v %s by %d", c.vhosts, c.filter, size)
			var bySkip, byCursor []vt
			var after vt
			for page := 0; ; page++ {
				items, n, err := s.BrowseRetained(RetainedPage{VHosts: c.vhosts, Filter: c.filter, Skip: page * size, Limit: size, Preview: 3})
				if err != nil || n != len(want) {
					t.Fatalf("%s: matched %d, want %d (%v)", name, n, len(want), err)
				}
				for _, i := range items {
					bySkip = append(bySkip, vt{i.VHost, i.Topic})
					if p := "p:" + i.Topic; string(i.Preview) != p[:min(3, len(p))] || i.Size != len(p) {
						t.Fatalf("%s: %s preview %q size %d", name, i.Topic, i.Preview, i.Size)
					}
				}
				cur, _, _ := s.BrowseRetained(RetainedPage{VHosts: c.vhosts, Filter: c.filter, AfterVHost: after.vh, AfterTopic: after.topic, Limit: size})
				for _, i := range cur {
					byCursor = append(byCursor, vt{i.VHost, i.Topic})
				}
				if len(cur) > 0 {
					after = byCursor[len(byCursor)-1]
				}
				if len(items) < size {
					break
				}
			}
			if !slices.Equal(bySkip, want) {
				t.Errorf("%s: by skip %d items, want %d (first %v)", name, len(bySkip), len(want), bySkip[:min(3, len(bySkip))])
			}
			if !slices.Equal(byCursor, want) {
				t.Errorf("%s: by cursor %d items, want %d", name, len(byCursor), len(want))
			}
		}
	}
	if _, _, err := s.BrowseRetained(RetainedPage{Filter: "a/#/b", Limit: 1}); err != ErrBadFilter {
		t.Errorf("invalid filter: %v", err)
	}
	// Clearing goes through the store and the index.
	e := all[0]
	if ok, err := s.ClearRetained(e.vh, e.topic); !ok || err != nil {
		t.Fatalf("clear %v: %v %v", e, ok, err)
	}
	if _, ok := st.m[retainedKey(e.vh, e.topic)]; ok {
		t.Error("the store still holds the cleared record")
	}
	if items, _, _ := s.BrowseRetained(RetainedPage{VHosts: []string{e.vh}, Filter: e.topic, Limit: 10}); len(items) != 0 {
		t.Errorf("cleared topic still listed: %v", items)
	}
	if ok, _ := s.ClearRetained(e.vh, e.topic); ok {
		t.Error("a second clear found the message")
	}
}
