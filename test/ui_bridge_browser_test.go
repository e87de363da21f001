package test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/trident-broker/trident/conf"
)

// TestUIMQTTBridges: the shovels page lists the MQTT bridges with their
// state, remote, topics and counts, and deletes one.
func TestUIMQTTBridges(t *testing.T) {
	bk, base := mgmtBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(201, "PUT", "/api/parameters/mqtt-bridge/%2F/ui-bridge", map[string]any{"value": map[string]any{
		"address": bk.mqttAddr(), "remote_username": "guest", "remote_password": "guest", "restart_timeout": 1,
		"topic": "ui/# out 1 \"\" mirror/"}})
	u := openUIOps(t, base, 1400, 900)
	u.open("#/shovels", "#mqtt-bridges table")
	row := `#bridges-table tr[data-bridge="ui-bridge"]`
	u.until("the bridge running", `(() => { const r = document.querySelector('`+row+`'); return !!r && r.querySelector('.bridge-state').innerText.startsWith('running') && r.innerText.includes('mirror/ui/#') && r.innerText.includes('`+bk.mqttAddr()+`'); })()`)
	u.shot("ops-08-mqtt-bridges")
	u.eval(`window.confirm = () => true`)
	u.do("delete", chromedp.Click(chromedp.CSS(row+` [data-delete]`)))
	u.until("the bridge gone", `!document.querySelector('`+row+`')`)
	if p := api.list("/api/parameters/mqtt-bridge"); len(p) != 0 {
		t.Fatalf("still defined: %v", p)
	}
}
