package testbin

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"sync"
)

// AnonMQTTUser and AnonMQTTPass are the user anonymous MQTT clients log in
// as in tests that turn mqtt.allow_anonymous on: a user of its own, never
// the bootstrap user (which the broker refuses).
const AnonMQTTUser, AnonMQTTPass = "mqtt-anon", "anon"

// AnonMQTTFlags turn anonymous MQTT on as AnonMQTTUser, created with full
// permissions on "/" from AnonDefinitions at boot.
func AnonMQTTFlags() []string {
	return []string{"--mqtt-allow-anonymous=true", "--mqtt-default-user", AnonMQTTUser,
		"--mqtt-default-pass", AnonMQTTPass, "--definitions", AnonDefinitions()}
}

var anonDefs struct {
	once sync.Once
	path string
}

// AnonDefinitions writes, once per test process, a definitions file
// (RabbitMQ's format) holding AnonMQTTUser and its permissions on "/", and
// returns its path (Main removes it when the tests end).
func AnonDefinitions() string {
	anonDefs.once.Do(func() {
		salt := []byte{1, 2, 3, 4}
		sum := sha256.Sum256(append(append([]byte{}, salt...), AnonMQTTPass...))
		hash := base64.StdEncoding.EncodeToString(append(salt, sum[:]...))
		defs := fmt.Sprintf(`{"users":[{"name":%q,"password_hash":%q,"hashing_algorithm":"rabbit_password_hashing_sha256","tags":""}],`+
			`"permissions":[{"user":%q,"vhost":"/","configure":".*","write":".*","read":".*"}]}`, AnonMQTTUser, hash, AnonMQTTUser)
		f, err := os.CreateTemp("", "trident-anon-mqtt-*.json")
		if err == nil {
			_, err = f.WriteString(defs)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			panic(fmt.Sprintf("testbin: anonymous MQTT definitions: %v", err))
		}
		anonDefs.path = f.Name()
		keepUntilExit(anonDefs.path)
	})
	return anonDefs.path
}
