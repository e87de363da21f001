#!/usr/bin/env bash
# Runs the integration suite of github.com/rabbitmq/amqp091-go against a broker.
#
#   scripts/amqp091-suite.sh URL [go test args...]
#
# e.g. scripts/amqp091-suite.sh amqp://guest:guest@127.0.0.1:5673/ -skip 'TestConnectionRecovery'
#
# The module is fetched through the module proxy (go mod download), copied out of
# the read-only module cache into a temporary directory and tested there with its
# own go.mod/go.sum:
#
#   AMQP_URL=URL go test -tags integration -count=1 -v [args...] .
#
# Extra arguments (-run, -skip, -race, -timeout, ...) are passed to go test as is.
# Environment:
#   AMQP091_VERSION            module version (default v1.16.0, the one in our go.mod)
#   RABBITMQ_RABBITMQCTL_PATH  passed through; without it the suite skips the one
#                              test that drives rabbitmqctl (memory alarm).
#   AMQP091_MGMT_PORT          if set (e.g. 15673 for the RabbitMQ anchor), forward
#                              127.0.0.1:15672 to 127.0.0.1:$AMQP091_MGMT_PORT with
#                              socat for the run, so that the connection-recovery
#                              tests, which hard-code the management API on
#                              localhost:15672, reach it. Refused if 15672 is taken.
# Exit status is go test's. See test/amqp091suite/README.md for which tests need
# RabbitMQ's management API on localhost:15672.
set -euo pipefail

if [ $# -lt 1 ] || [ -z "$1" ]; then
  echo "usage: $0 AMQP_URL [go test args...]" >&2
  exit 2
fi
url=$1
shift
version=${AMQP091_VERSION:-v1.16.0}
mod=github.com/rabbitmq/amqp091-go

work=$(mktemp -d "${TMPDIR:-/tmp}/amqp091-suite.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# Download outside any module so that our own go.mod/go.sum are never touched.
dir=$(cd "$work" && GO111MODULE=on GOFLAGS=-mod=mod go mod download -json "$mod@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [ -z "$dir" ] || [ ! -f "$dir/integration_test.go" ]; then
  echo "amqp091-suite: could not locate $mod@$version in the module cache (got '$dir')" >&2
  exit 2
fi

src="$work/amqp091-go"
cp -R "$dir" "$src"
chmod -R u+w "$src"
cd "$src"

fwd_pid=
if [ -n "${AMQP091_MGMT_PORT:-}" ] && [ "$AMQP091_MGMT_PORT" != 15672 ]; then
  if (exec 3<>/dev/tcp/127.0.0.1/15672) 2>/dev/null; then
    echo "amqp091-suite: AMQP091_MGMT_PORT set but 127.0.0.1:15672 is already in use" >&2
    exit 2
  fi
  command -v socat >/dev/null || { echo "amqp091-suite: AMQP091_MGMT_PORT needs socat" >&2; exit 2; }
  socat "TCP-LISTEN:15672,bind=127.0.0.1,fork,reuseaddr" "TCP:127.0.0.1:$AMQP091_MGMT_PORT" &
  fwd_pid=$!
  trap 'kill "$fwd_pid" 2>/dev/null; chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  for _ in 1 2 3 4 5 6 7 8 9 10; do (exec 3<>/dev/tcp/127.0.0.1/15672) 2>/dev/null && break; sleep 0.2; done
  echo "amqp091-suite: forwarding 127.0.0.1:15672 -> 127.0.0.1:$AMQP091_MGMT_PORT (socat pid $fwd_pid)" >&2
fi

echo "amqp091-suite: $mod@$version against $url (in $src)" >&2
export AMQP_URL="$url"
export GOFLAGS=-mod=mod
export GOWORK=off
status=0
go test -tags integration -count=1 -v "$@" . || status=$?
exit $status
