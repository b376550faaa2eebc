#!/usr/bin/env bash
# bench/soak/run.sh — run the gateway for a while under mixed traffic and
# rule rewrites, and report whether anything went wrong (make soak).
#
# Builds the gateway, bench/upstream and bench/soak, then runs bench/soak,
# which starts the upstream and the gateway on loopback, sends the traffic,
# rewrites the rule file, checks every response and reload, and writes a
# markdown report to bench/results/soak-<UTC timestamp>.md (see the doc
# comment of bench/soak/main.go for what fails the soak). Needs only Go.
#
# Usage: bash bench/soak/run.sh            (or: make soak)
# Tunables (environment): DURATION=10m RATE=1500 WORKERS=16 RELOAD_EVERY=3s
#   PORT_BASE=18380 (upstream PORT_BASE+1, proxy +11, admin +1011) OUT=bench/results
# A quick check: DURATION=30s bash bench/soak/run.sh
set -euo pipefail

DURATION=${DURATION:-10m}
RATE=${RATE:-1500}
WORKERS=${WORKERS:-16}
RELOAD_EVERY=${RELOAD_EVERY:-3s}
PORT_BASE=${PORT_BASE:-18380}
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/bench/results}

if ! command -v go >/dev/null; then
	echo "bench/soak needs Go (see go.mod for the version)" >&2
	exit 1
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "building" >&2
VERSION=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
go build -o "$WORK/upstream" ./bench/upstream
go build -o "$WORK/soak" ./bench/soak
CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=$VERSION" -o "$WORK/gateway" ./cmd/gateway

status=0
"$WORK/soak" -gateway "$WORK/gateway" -upstream "$WORK/upstream" -workdir "$WORK" -out "$OUT" \
	-duration "$DURATION" -rate "$RATE" -workers "$WORKERS" -reload-every "$RELOAD_EVERY" \
	-port-base "$PORT_BASE" || status=$?
if [ "$status" -ne 0 ] && [ -s "$WORK/gateway.log" ]; then
	echo "soak failed (exit $status); the gateway log's last lines:" >&2
	tail -n 20 "$WORK/gateway.log" >&2
fi
exit "$status"
