#!/usr/bin/env bash
# Runs the functional tests shipped with github.com/eclipse/paho.mqtt.golang
# (its fvt_*_test.go) against a broker listening on MQTT port 1883.
#
#   scripts/paho-fvt.sh [HOST] [go test args...]
#
# HOST becomes TEST_FVT_ADDR (default 127.0.0.1); the suite hard-codes port
# 1883. The module is fetched through the module proxy (go mod download),
# copied out of the read-only module cache into a temporary directory and
# tested there with its own go.mod/go.sum:
#
#   TEST_FVT_ADDR=HOST go test -count=1 -v -run 'Test_' [args...] .
#
# Only the fvt tests run by default (-run selects them by file through
# PAHO_FVT_RUN); extra arguments (-skip, -race, -timeout, ...) are passed to
# go test as is. Exit status is go test's.
set -euo pipefail

host=${1:-127.0.0.1}
[ $# -gt 0 ] && shift
version=${PAHO_FVT_VERSION:-v1.5.1}
mod=github.com/eclipse/paho.mqtt.golang

work=$(mktemp -d "${TMPDIR:-/tmp}/paho-fvt.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

dir=$(cd "$work" && GO111MODULE=on GOFLAGS=-mod=mod go mod download -json "$mod@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [ -z "$dir" ] || [ ! -f "$dir/fvt_client_test.go" ]; then
  echo "paho-fvt: could not locate $mod@$version in the module cache (got '$dir')" >&2
  exit 2
fi
src="$work/paho.mqtt.golang"
cp -R "$dir" "$src"
chmod -R u+w "$src"
cd "$src"

# The fvt tests are the Test functions of fvt_*_test.go.
run=${PAHO_FVT_RUN:-^($(grep -ho '^func \(Test[A-Za-z0-9_]*\)' fvt_*_test.go | sed 's/^func //' | paste -sd '|'))$}

echo "paho-fvt: $mod@$version against $host:1883 (in $src)" >&2
export TEST_FVT_ADDR="$host"
export GOFLAGS=-mod=mod
export GOWORK=off
status=0
go test -count=1 -v -run "$run" "$@" . || status=$?
exit $status
