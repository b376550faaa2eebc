#!/usr/bin/env bash
# bench/rls/diff/run.sh — the differential run: the same ShouldRateLimit
# calls to envoyproxy/ratelimit and to `gateway rls` (from their
# environment, and with the gateway's defaults) on one redis-server, every
# answer compared (bench/rls/diff/main.go; docs/rls.md, "Declared
# differences"). Exits 1 when a case differs without a declared
# difference.
#
#   bash bench/rls/diff/run.sh [diff flags, e.g. -run 'override' -v]
#
# envoyproxy/ratelimit is built from the Go module proxy's copy of
# RATELIMIT_VERSION (./src/service_cmd), the version whose configs are in
# internal/rlsconfig/testdata/envoyproxy. The report is also written to
# OUT (default bench/results/rls-diff-STAMP.md). Needs redis-server.
set -euo pipefail
RATELIMIT_VERSION=${RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh
OUT=${OUT:-$ROOT/bench/results/rls-diff-$(date -u +%Y-%m-%dT%H%M%SZ).md}

echo "building gateway, the diff and envoyproxy/ratelimit $RATELIMIT_VERSION" >&2
go build -o "$WORK/gateway" ./cmd/gateway
go build -o "$WORK/diff" ./bench/rls/diff
src=$(cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "github.com/envoyproxy/ratelimit@$RATELIMIT_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
cp -r "$src" "$WORK/ratelimit-src"
chmod -R u+w "$WORK/ratelimit-src"
(cd "$WORK/ratelimit-src" && go build -o "$WORK/ratelimit" ./src/service_cmd)
mkdir -p "$(dirname "$OUT")"
"$WORK/diff" -ratelimit "$WORK/ratelimit" -gateway "$WORK/gateway" -ref-version "$RATELIMIT_VERSION" -out "$OUT" "$@"
