#!/usr/bin/env bash
# What `make test` needs beyond Go, from Debian's packages: gcc (the race
# detector), chromium (the browser tests: Web-STOMP with @stomp/stompjs, the
# management UI), rabbitmqadmin (from rabbitmq-server: the rabbitmqadmin
# test), podman (the image test), and the clients the docs' commands use
# (make docs-check: curl, socat, mosquitto-clients, amqp-tools). Run as root, it installs what is
# missing (as CI does); otherwise it stops and says what is missing, rather
# than let those tests skip and the run read as passed.
# TRIDENT_TEST_DEPS=skip runs without them: their tests then skip, and this
# says so.
set -euo pipefail
missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v rabbitmqadmin >/dev/null 2>&1 || missing+=(rabbitmq-server)
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v socat >/dev/null 2>&1 || missing+=(socat)
command -v mosquitto_pub >/dev/null 2>&1 || missing+=(mosquitto-clients)
command -v amqp-publish >/dev/null 2>&1 || missing+=(amqp-tools)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "${TRIDENT_TEST_DEPS:-}" = skip ]; then
  echo "make test: without ${missing[*]}: the tests that need them SKIP (TRIDENT_TEST_DEPS=skip)" >&2
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "make test needs these Debian packages: ${missing[*]}" >&2
  echo "  install them (sudo apt-get install ${missing[*]}), or run make test as root to have them installed;" >&2
  echo "  TRIDENT_TEST_DEPS=skip make test runs without them (their tests skip)." >&2
  exit 1
fi
apt-get update -qq
for p in "${missing[@]}"; do
  case $p in
  rabbitmq-server)
    # Only for rabbitmqadmin: installed without starting the service
    # (policy-rc.d refuses service starts during the install).
    had_policy=0
    [ -e /usr/sbin/policy-rc.d ] && had_policy=1 && cp /usr/sbin/policy-rc.d /tmp/policy-rc.d.test-deps-saved
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rabbitmq-server
    if [ "$had_policy" = 1 ]; then mv /tmp/policy-rc.d.test-deps-saved /usr/sbin/policy-rc.d; else rm -f /usr/sbin/policy-rc.d; fi
    ;;
  chromium) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium ;;
  *) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" ;;
  esac
done
