package wire

import "testing"

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/b/c", "a/b/c", true},
		{"a/+/c", "a/b/c", true},
		{"a/+/c", "a/b/d", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "a/b", true},
		{"+", "a", true},
		{"+", "a/b", false},
		{"+/+", "/a", true},
		{"a/+", "a/", true},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"a/b", "a/b/c", false},
		{"a/b/c", "a/b", false},
	} {
		if got := Match(tc.filter, tc.topic); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
		}
	}
}

func TestMapping(t *testing.T) {
	for _, tc := range []struct{ topic, key string }{
		{"a/b/c", "a.b.c"},
		{"v1.2/x", "v1/2.x"},
		{"/lead", ".lead"},
		{"plain", "plain"},
	} {
		if got := TopicToKey(tc.topic); got != tc.key {
			t.Errorf("TopicToKey(%q) = %q, want %q", tc.topic, got, tc.key)
		}
		if got := KeyToTopic(tc.key); got != tc.topic {
			t.Errorf("KeyToTopic(%q) = %q, want %q", tc.key, got, tc.topic)
		}
	}
	for _, tc := range []struct{ filter, key string }{
		{"a/+/c", "a.*.c"},
		{"a/#", "a.#"},
		{"#", "#"},
		{"x.y/+", "x/y.*"},
	} {
		if got := FilterToKey(tc.filter); got != tc.key {
			t.Errorf("FilterToKey(%q) = %q, want %q", tc.filter, got, tc.key)
		}
	}
}

func TestValidFilterAndShared(t *testing.T) {
	for f, want := range map[string]bool{
		"a/b": true, "a/+/c": true, "#": true, "a/#": true,
		"a/#/b": false, "a+": false, "a/b#": false, "": false, "a\x00": false,
	} {
		if got := ValidFilter(f); got != want {
			t.Errorf("ValidFilter(%q) = %v", f, got)
		}
	}
	g, f, ok, valid := SharedFilter("$share/grp/a/+")
	if g != "grp" || f != "a/+" || !ok || !valid {
		t.Fatalf("SharedFilter = %q %q %v %v", g, f, ok, valid)
	}
	if _, _, ok, valid := SharedFilter("$share/grp"); !ok || valid {
		t.Fatal("$share/grp must be an invalid shared filter")
	}
	if _, _, ok, _ := SharedFilter("a/b"); ok {
		t.Fatal("a/b is not shared")
	}
}

func FuzzTopic(f *testing.F) {
	for _, s := range []string{"a/b/c", "v1.2/x", "#", "a/+/#", "$share/g/a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if KeyToTopic(TopicToKey(s)) != s {
			t.Fatalf("topic mapping does not round-trip for %q", s)
		}
		if ValidFilter(s) {
			_ = Match(s, s)
		}
		_, _, _, _ = SharedFilter(s)
	})
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		filter, outer string
		want          bool
	}{
		{"test/nosubscribe", "test/nosubscribe", true},
		{"test/nosubscribe", "test/#", true},
		{"test", "test/#", true},
		{"test/a/b", "test/+/b", true},
		{"test/+/b", "test/+/b", true},
		{"test/+/b", "test/a/b", false},
		{"test/#", "test/+", false},
		{"test/#", "#", true},
		{"#", "test/#", false},
		{"test/a", "test/a/b", false},
		{"test/a/b", "test/a", false},
		{"+/a", "+/+", true},
		{"other/nosubscribe", "test/nosubscribe", false},
	} {
		if got := Within(tc.filter, tc.outer); got != tc.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tc.filter, tc.outer, got, tc.want)
		}
	}
}
