#!/usr/bin/env bash
# Installs the Mosquitto broker from Debian's package, for the MQTT bridge
# tests (test/mqtt_bridge_test.go runs it when mosquitto is missing). The
# package's service is not started: the tests run mosquitto themselves,
# on a free port with a config of their own. Needs root and apt.
set -euo pipefail
if command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-mosquitto: needs root and apt-get (apt-get install mosquitto)" >&2
  exit 1
fi
had_policy=0
[ -e /usr/sbin/policy-rc.d ] && had_policy=1 && cp /usr/sbin/policy-rc.d /tmp/policy-rc.d.mosquitto-saved
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
restore() {
  if [ "$had_policy" = 1 ]; then mv /tmp/policy-rc.d.mosquitto-saved /usr/sbin/policy-rc.d; else rm -f /usr/sbin/policy-rc.d; fi
}
trap restore EXIT
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mosquitto
