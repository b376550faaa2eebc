#!/usr/bin/env bash
# bench/flood/run.sh — what a flood of distinct client IPs costs the gateway.
#
# Starts bench/upstream and, for each case in CASES, a fresh gateway
# (memory store, --trusted-proxies 127.0.0.1/32), then runs bench/flood:
# N requests with no app ID, each with its own X-Forwarded-For address, so
# each is an unknown caller with its own per-IP counter until --max-keys is
# reached and the rest share the overflow counter. It reports the
# gateway's resident memory, heap in use and limiter keys before, at the
# peak (sampled every 10s) and after, from the admin /metrics, as a
# markdown table in bench/results/flood-<UTC timestamp>.md.
#
# A case is MAXKEYS:RULES. RULES "example" is configs/ratelimiter-rule.yaml,
# whose "*" counters are idle a minute after their request, so the
# gateway's once-a-minute sweep evicts them during a flood that takes
# longer than that; "hold" is the same "*" rule with a one-hour window, so
# that the store keeps every key it is given: the most the cap allows.
#
# Usage: bash bench/flood/run.sh
# Tunables (environment): N=1000000 CONNS=32
#   CASES="1000000:example 100000:example 1000000:hold"
#   BASE_PORT=18280 (upstream BASE_PORT+1, proxy +11, admin +1011) OUT=bench/results
set -euo pipefail

N=${N:-1000000}
CONNS=${CONNS:-32}
CASES=${CASES:-1000000:example 100000:example 1000000:hold}
BASE_PORT=${BASE_PORT:-18280}
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/bench/results}
UPSTREAM_PORT=$((BASE_PORT + 1))
PROXY_PORT=$((BASE_PORT + 11))
ADMIN_PORT=$((BASE_PORT + 1011))

# shellcheck source=bench/lib.sh
. bench/lib.sh

echo "building" >&2
go build -o "$WORK/upstream" ./bench/upstream
go build -o "$WORK/flood" ./bench/flood
CGO_ENABLED=0 go build -trimpath -o "$WORK/gateway" ./cmd/gateway

"$WORK/upstream" -listen "127.0.0.1:$UPSTREAM_PORT" >"$WORK/upstream.log" 2>&1 &
pids+=($!)
wait_port "$UPSTREAM_PORT"

cat >"$WORK/hold.yaml" <<'EOF'
# The example rules' "*" section with a one-hour window.
configs:
  - appId: "*"
    by: ip
    limits:
      - api: /
        limit: 20
        unit: 1h
EOF

rows=()
for c in $CASES; do
	cap=${c%%:*}
	rules=${c#*:}
	case $rules in
	example) config=configs/ratelimiter-rule.yaml ;;
	hold) config=$WORK/hold.yaml ;;
	*)
		echo "case $c: the rules must be example or hold" >&2
		exit 2
		;;
	esac
	echo "--max-keys $cap, $rules rules: $N requests from distinct client IPs" >&2
	"$WORK/gateway" serve --config "$config" --watch=false \
		--upstream "http://127.0.0.1:$UPSTREAM_PORT" --trusted-proxies 127.0.0.1/32 \
		--listen "127.0.0.1:$PROXY_PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" \
		--max-keys "$cap" --log-level warn >"$WORK/gateway-$cap-$rules.log" 2>&1 &
	gw=$!
	pids+=("$gw")
	wait_port "$PROXY_PORT"
	wait_port "$ADMIN_PORT"
	rows+=("$("$WORK/flood" -n "$N" -conns "$CONNS" -label "$cap | $rules" \
		-target "http://127.0.0.1:$PROXY_PORT/v1/user/42" -admin "http://127.0.0.1:$ADMIN_PORT")")
	kill "$gw"
	wait "$gw" || true
done

mkdir -p "$OUT"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
file="$OUT/flood-$stamp.md"
{
	echo "# gateway under a flood of distinct client IPs, $stamp"
	echo
	echo "Machine: $(nproc) cores, $(awk -F: '/model name/ { print $2; exit }' /proc/cpuinfo | sed 's/^ *//'), $(uname -sr), $(go version | awk '{ print $3 }')."
	echo "Each gateway fresh: memory store, --trusted-proxies 127.0.0.1/32. Rules \"example\": configs/ratelimiter-rule.yaml"
	echo "(\"*\": one counter per client IP, 20 a minute on /; idle keys swept every minute); \"hold\": the same \"*\" rule"
	echo "with a one-hour window, so that no key is swept. bench/flood sends GET /v1/user/42 with no app ID and its own"
	echo "X-Forwarded-For address over $CONNS keep-alive connections. Peaks: the highest of samples every 10s and the end."
	echo
	echo "| --max-keys | rules | requests | time | statuses | RSS before | RSS peak | RSS after | heap in use peak | heap in use after | keys before | keys peak | keys after |"
	echo "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	printf '%s\n' "${rows[@]}"
} >"$file"
cat "$file"
echo "written to $file" >&2
