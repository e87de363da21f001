package stomp

import "testing"

func TestParseDestination(t *testing.T) {
	cases := []struct {
		in      string
		want    destination
		errMsg  string
		x, key  string
		display string
	}{
		{in: "/queue/a", want: destination{kind: destQueue, name: "a"}, key: "a", display: "/queue/a"},
		{in: "/queue/a%2Fb", want: destination{kind: destQueue, name: "a/b"}, key: "a/b", display: "/queue/a%2Fb"},
		{in: "/queue/", errMsg: "Invalid destination"},
		{in: "/queue/a/b", errMsg: "Invalid destination"},
		{in: "/topic/x.*.y", want: destination{kind: destTopic, name: "x.*.y"}, x: "amq.topic", key: "x.*.y", display: "/topic/x.*.y"},
		{in: "/amq/queue/q", want: destination{kind: destAMQQueue, name: "q"}, key: "q", display: "/queue/q"},
		{in: "/temp-queue/t", want: destination{kind: destTempQueue, name: "t"}},
		{in: "/reply-queue/stomp.gen-a/b", want: destination{kind: destReplyQueue, name: "stomp.gen-a/b"}, key: "stomp.gen-a/b", display: "/queue/stomp.gen-a%2Fb"},
		{in: "/exchange/amq.direct", want: destination{kind: destExchange, name: "amq.direct"}, x: "amq.direct", display: "/exchange/amq.direct"},
		{in: "/exchange/x/k.#", want: destination{kind: destExchange, name: "x", pattern: "k.#"}, x: "x", key: "k.#", display: "/exchange/x/k.#"},
		{in: "/exchange//k", errMsg: "Invalid destination"},
		{in: "/exchange/x/k/z", errMsg: "Invalid destination"},
		{in: "/nowhere/x", errMsg: "Unknown destination"},
		{in: "queue", errMsg: "Unknown destination"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			d, err := parseDestination(tc.in)
			if tc.errMsg != "" {
				if err == nil || err.Message != tc.errMsg {
					t.Fatalf("got %+v, %v; want error %q", d, err, tc.errMsg)
				}
				return
			}
			if err != nil || d != tc.want {
				t.Fatalf("got %+v, %v; want %+v", d, err, tc.want)
			}
			if d.kind == destTempQueue {
				return
			}
			x, key := d.route()
			if x != tc.x || key != tc.key {
				t.Fatalf("route %q %q, want %q %q", x, key, tc.x, tc.key)
			}
			if got := formatDestination(x, key); got != tc.display {
				t.Fatalf("formatted %q, want %q", got, tc.display)
			}
		})
	}
}

func TestHasDestPrefix(t *testing.T) {
	for s, want := range map[string]bool{"/queue/a": true, "/reply-queue/x": true, "/temp-queue/t": true,
		"replies": false, "amq.gen-x": false, "/queue": false} {
		if hasDestPrefix(s) != want {
			t.Errorf("hasDestPrefix(%q) = %v", s, !want)
		}
	}
}
