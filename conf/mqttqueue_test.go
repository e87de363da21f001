package conf

import (
	"strings"
	"testing"
)

// TestMQTTDurableQueueType: mqtt.durable_queue_type is classic by
// default, takes quorum from the file, a flag or the environment, and
// anything else is refused with the key's path.
func TestMQTTDurableQueueType(t *testing.T) {
	if got := Default().MQTT.DurableQueueType; got != "classic" {
		t.Fatalf("default %q, want classic", got)
	}
	file := writeFile(t, "mqtt:\n  durable_queue_type: quorum\n")
	for name, load := range map[string]func() (Config, error){
		"file": func() (Config, error) { return Load([]string{"--config", file}, envMap(nil)) },
		"flag": func() (Config, error) { return Load([]string{"--mqtt-durable-queue-type", "quorum"}, envMap(nil)) },
		"env": func() (Config, error) {
			return Load(nil, envMap(map[string]string{"TRIDENT_MQTT_DURABLE_QUEUE_TYPE": "quorum"}))
		},
	} {
		c, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.MQTT.DurableQueueType != "quorum" {
			t.Fatalf("%s: %q, want quorum", name, c.MQTT.DurableQueueType)
		}
	}
	for _, v := range []string{"stream", "Quorum", "qq"} {
		c := Default()
		c.MQTT.DurableQueueType = v
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "mqtt.durable_queue_type") {
			t.Fatalf("%q: err %v, want one naming mqtt.durable_queue_type", v, err)
		}
	}
}
