package test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-stomp/stomp/v3"

	"github.com/trident-broker/trident/conf"
)

// wsDialOrigin opens a WebSocket to url with the given Origin header
// ("" sends none) and returns the connection or the HTTP status of the
// refused upgrade.
func wsDialOrigin(t *testing.T, url, origin string, protos ...string) (*websocket.Conn, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: protos, HTTPHeader: h})
	if err != nil {
		if resp == nil {
			t.Fatalf("dial %s with Origin %q: %v", url, origin, err)
		}
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws, http.StatusSwitchingProtocols
}

// TestSecurityF2WebSocketOrigin (issue 38, F2): a web page on another
// origin could open Web-STOMP (and Web-MQTT) in its visitor's browser and
// act from the visitor's network position (guest from loopback). Now
// every WebSocket listener refuses an upgrade whose Origin is neither the
// request's own host nor in http.allowed_origins with 403; requests with
// no Origin (not browsers) are accepted.
func TestSecurityF2WebSocketOrigin(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) {
		c.STOMP.WSListen, c.MQTT.WSListen = "127.0.0.1:0", "127.0.0.1:0"
		c.HTTP.AllowedOrigins = []string{"https://app.example.com", "*.trusted.test:8443"}
	})
	endpoints := []struct {
		name   string
		addr   string
		protos []string
	}{
		{"web-stomp", b.n.STOMPWSAddr().String(), []string{"v12.stomp"}},
		{"web-mqtt", b.n.MQTTWSAddr().String(), []string{"mqtt"}},
	}
	for _, e := range endpoints {
		url := "ws://" + e.addr + "/ws"
		for _, c := range []struct {
			origin string
			want   int
		}{
			{"", http.StatusSwitchingProtocols},                             // not a browser
			{"http://" + e.addr, http.StatusSwitchingProtocols},             // same host
			{"https://app.example.com", http.StatusSwitchingProtocols},      // listed
			{"https://eu.trusted.test:8443", http.StatusSwitchingProtocols}, // listed pattern
			{"http://evil.example", http.StatusForbidden},
			{"http://evil.example:" + e.addr[len("127.0.0.1:"):], http.StatusForbidden},
			{"http://app.example.com", http.StatusForbidden},       // listed with https only
			{"https://eu.trusted.test:9443", http.StatusForbidden}, // other port
			{"null", http.StatusForbidden},                         // sandboxed page, file://
		} {
			if _, got := wsDialOrigin(t, url, c.origin, e.protos...); got != c.want {
				t.Errorf("%s with Origin %q: status %d, want %d", e.name, c.origin, got, c.want)
			}
		}
	}

	// An allowed foreign origin gets a working session.
	ws, code := wsDialOrigin(t, "ws://"+endpoints[0].addr+"/ws", "https://app.example.com", "v12.stomp")
	if ws == nil {
		t.Fatalf("allowed origin: %d", code)
	}
	nc := &stWSConn{Conn: websocket.NetConn(context.Background(), ws, websocket.MessageText), ws: ws}
	c, err := stomp.Connect(nc, stHostOpt(), stomp.ConnOpt.Login("guest", "guest"))
	if err != nil {
		t.Fatalf("web-stomp from an allowed origin: %v", err)
	}
	c.Disconnect()

	// "*" allows any origin.
	any := startBroker(t, func(c *conf.Config) {
		c.STOMP.WSListen, c.MQTT.WSListen = "127.0.0.1:0", "127.0.0.1:0"
		c.HTTP.AllowedOrigins = []string{"*"}
	})
	for _, u := range []string{"ws://" + any.n.STOMPWSAddr().String() + "/ws", "ws://" + any.n.MQTTWSAddr().String() + "/ws"} {
		if _, got := wsDialOrigin(t, u, "http://evil.example", "v12.stomp", "mqtt"); got != http.StatusSwitchingProtocols {
			t.Errorf("%s with allowed_origins [*]: status %d", u, got)
		}
	}

	// A pattern that is not one is refused at start.
	bad := conf.Default()
	bad.HTTP.AllowedOrigins = []string{"[oops"}
	if err := bad.Validate(); err == nil {
		t.Error("http.allowed_origins [\"[oops\"] passed Validate")
	}
}
