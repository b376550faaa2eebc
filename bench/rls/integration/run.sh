#!/usr/bin/env bash
# bench/rls/integration/run.sh — runs envoyproxy/ratelimit's own integration
# tests (test/integration, at the module version of
# internal/rlsconfig/testdata/envoyproxy) against `gateway rls` run from
# their environment, on real redis-servers: patched only to start an
# external gateway rls instead of their runner in process, and to leave
# out their stats assertions (patch.py, external_test.go.in). See
# docs/rls.md, "Their integration tests".
#
#   bash bench/rls/integration/run.sh [go test -run pattern]
#   GATEWAY_ENV=GATEWAY_REFERENCE_COUNTING=false bash bench/rls/integration/run.sh
#
# The second counts with the gateway's defaults rather than theirs.
# TEST_LOG=FILE keeps go test's whole output there.
# Needs redis-server on PATH; the tests use its fixed ports 6380-6385.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
version=v1.4.1-0.20260122083618-3fb702589d36
run=${1:-'^(TestBasicConfig|TestBasicAuthConfig|TestBasicReloadConfig|TestShareThreshold|TestXdsProviderBasicConfig|TestXdsProviderBasicConfigReload|Test_mTLS|TestReloadGRPCServerCerts|Test_mTLSSetup)$'}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/envoyproxy/ratelimit@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
cp -r "$dir" "$work/ratelimit"
chmod -R u+w "$work/ratelimit"
(cd "$repo" && go build -o "$work/gateway" ./cmd/gateway)
it="$work/ratelimit/test/integration"
python3 "$here/patch.py" "$it/integration_test.go"
cp "$here/external_test.go.in" "$it/external_test.go"
mkdir -p "$work/logs"
cd "$it"
GATEWAY_BIN="$work/gateway" GATEWAY_LOGS="$work/logs" GATEWAY_ENV="${GATEWAY_ENV:-}" GOFLAGS=-mod=mod \
	go test -tags integration -count=1 -v -run "$run" . 2>&1 | tee "$work/test.log" | grep -E '^(=== RUN|\s*--- (PASS|FAIL|SKIP)|PASS|FAIL|ok)' || true
if [[ -n ${TEST_LOG:-} ]]; then cp "$work/test.log" "$TEST_LOG"; fi
if grep -q '^--- FAIL\|^FAIL' "$work/test.log"; then
	grep -E '^\s+(integration_test|common)\.go:[0-9]+:|Error:|expected|actual' "$work/test.log" | head -80 || true
	exit 1
fi
