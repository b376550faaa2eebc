#!/usr/bin/env bash
# bench/rls/run.sh — gateway rls against envoyproxy/ratelimit on one Redis.
#
# Both services read bench/rls/config.yaml unchanged and count in the same
# redis-server. Each runs on one core (PROXY_CPU, GOMAXPROCS=1); Redis and
# the load client (bench/rls/load: WORKERS concurrent unary calls over
# CONNS connections) share the other (LOAD_CPU). Contenders alternate in
# each round, in reverse order in even rounds; the table gives medians over
# the rounds and ratios to envoyproxy/ratelimit:
#
#   hot      one descriptor value, always admitted
#   limited  one value, over its limit (10 a minute) after the first calls
#   cold     values drawn at random from 100,000: a new counter per call, mostly
#
# Measured per case, across the run, over the calls answered: decisions/s;
# the service's CPU time per decision (user+sys ticks of its process);
# Redis calls sent per decision (INFO commandstats: FCALL, EVALSHA and
# EVAL, which gateway rls sends, plus INCRBY and EXPIRE, which
# envoyproxy/ratelimit sends; neither sends the other's); Redis commands
# run per decision (INFO stats total_commands_processed: those calls, the
# commands the scripts run inside them, health checks and the fleet
# heartbeat); and Redis's own CPU time per decision (INFO cpu
# used_cpu_user + used_cpu_sys).
#
# envoyproxy/ratelimit runs with its defaults (fixed windows, one INCRBY and
# one EXPIRE per descriptor in a pipeline, no local cache), statsd off;
# gateway rls with its defaults (sliding window, batching, leases, deny
# cache) and as gateway-exact with --redis-batch 1 --redis-leases -1; both
# with --redis-timeout 1s, so that a busy machine does not make Redis calls
# time out and be decided by --fail-mode instead (envoyproxy/ratelimit
# waits for Redis however long it takes). A contender's errors are calls
# that failed; its log says why.
#
# envoyproxy/ratelimit is built from the Go module proxy's copy of
# RATELIMIT_VERSION (./src/service_cmd).
#
# Usage: bash bench/rls/run.sh
# Tunables (environment): ROUNDS=3 DURATION=10s CONNS=4 WORKERS=64 PROXY_CPU=0
#   LOAD_CPU=1 CASES="hot limited cold" OUT=bench/results BASE_PORT=18380
#   RATELIMIT_VERSION=v1.4.1-0.20260122083618-3fb702589d36
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-4}
WORKERS=${WORKERS:-64}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
CASES=${CASES:-hot limited cold}
BASE_PORT=${BASE_PORT:-18380}
RATELIMIT_VERSION=${RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/bench/results}
REDIS_PORT=$((BASE_PORT + 1))

# shellcheck source=bench/lib.sh
. bench/lib.sh

echo "building gateway, the load client and envoyproxy/ratelimit $RATELIMIT_VERSION" >&2
go build -o "$WORK/gateway" ./cmd/gateway
go build -o "$WORK/load" ./bench/rls/load
src=$(go mod download -json "github.com/envoyproxy/ratelimit@$RATELIMIT_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
cp -r "$src" "$WORK/ratelimit-src"
chmod -R u+w "$WORK/ratelimit-src"
(cd "$WORK/ratelimit-src" && go build -o "$WORK/ratelimit" ./src/service_cmd)

taskset -c "$LOAD_CPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
	--daemonize no --loglevel warning --dir "$WORK" >"$WORK/redis.log" 2>&1 &
pids+=($!)
wait_port "$REDIS_PORT"
mkdir -p "$WORK/runtime/ratelimit/config"
cp bench/rls/config.yaml "$WORK/runtime/ratelimit/config/"

# contender NAME: start it on PROXY_CPU; sets PID and GRPC.
contender() {
	local name=$1 n=$2
	GRPC=$((BASE_PORT + 10 + n))
	case $name in
	envoy-ratelimit)
		env GOMAXPROCS=1 USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp \
			REDIS_URL="127.0.0.1:$REDIS_PORT" RUNTIME_ROOT="$WORK/runtime" RUNTIME_SUBDIRECTORY=ratelimit \
			RUNTIME_WATCH_ROOT=false GRPC_HOST=127.0.0.1 GRPC_PORT="$GRPC" HOST=127.0.0.1 PORT=$((GRPC + 100)) \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT=$((GRPC + 200)) \
			taskset -c "$PROXY_CPU" "$WORK/ratelimit" >"$WORK/$name.log" 2>&1 &
		;;
	gateway | gateway-exact)
		local extra=()
		[[ $name == gateway-exact ]] && extra=(--redis-batch 1 --redis-leases -1)
		env GOMAXPROCS=1 taskset -c "$PROXY_CPU" "$WORK/gateway" rls --config bench/rls/config.yaml \
			--listen "127.0.0.1:$GRPC" --admin-listen "127.0.0.1:$((GRPC + 100))" \
			--store redis --redis-url "redis://127.0.0.1:$REDIS_PORT/0" --redis-timeout 1s --log-level warn "${extra[@]}" \
			>"$WORK/$name.log" 2>&1 &
		;;
	esac
	PID=$!
	pids+=("$PID")
	wait_port "$GRPC"
}

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
commands() { redis-cli -p "$REDIS_PORT" info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p'; }
sent() {
	redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' |
		awk -F'[:=,]' '/^cmdstat_(evalsha|eval|fcall|incrby|expire):/ { n += $3 } END { print n + 0 }'
}
# rcpu: Redis's user+sys CPU time so far, in microseconds.
rcpu() {
	redis-cli -p "$REDIS_PORT" info cpu | tr -d '\r' |
		awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.0f\n", s * 1e6 }'
}

names=(envoy-ratelimit gateway gateway-exact)
declare -A PIDS PORTS
for i in "${!names[@]}"; do
	contender "${names[$i]}" "$i"
	PIDS[${names[$i]}]=$PID
	PORTS[${names[$i]}]=$GRPC
done
hz=$(getconf CLK_TCK)
results="$WORK/results.tsv"
for round in $(seq "$ROUNDS"); do
	order=("${names[@]}")
	if ((round % 2 == 0)); then order=(gateway-exact gateway envoy-ratelimit); fi
	for c in $CASES; do
		for name in "${order[@]}"; do
			redis-cli -p "$REDIS_PORT" flushall >/dev/null
			# A second of warm-up: connections, the script, leases.
			taskset -c "$LOAD_CPU" "$WORK/load" -addr "127.0.0.1:${PORTS[$name]}" -key "$c" -values 1 -duration 1s >/dev/null
			values=1
			[[ $c == cold ]] && values=100000
			redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
			t0=$(ticks "${PIDS[$name]}")
			r0=$(commands) s0=$(sent) c0=$(rcpu)
			out=$(taskset -c "$LOAD_CPU" "$WORK/load" -addr "127.0.0.1:${PORTS[$name]}" -key "$c" -values "$values" \
				-conns "$CONNS" -workers "$WORKERS" -duration "$DURATION")
			t1=$(ticks "${PIDS[$name]}")
			r1=$(commands) s1=$(sent) c1=$(rcpu)
			calls=$(sed -n 's/.*"calls":\([0-9]*\).*/\1/p' <<<"$out")
			secs=$(sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' <<<"$out")
			errors=$(sed -n 's/.*"errors":\([0-9]*\).*/\1/p' <<<"$out")
			ok=$(sed -n 's/.*"ok":\([0-9]*\).*/\1/p' <<<"$out")
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$name" "$calls" "$secs" "$((t1 - t0))" "$((r1 - r0))" "$errors" "$ok" "$((s1 - s0))" "$((c1 - c0))" >>"$results"
			echo "round $round $c $name: $out" >&2
			if grep -q '"firstError"' <<<"$out"; then cp "$WORK/$name.log" "$OUT/rls-$name-errors.log" 2>/dev/null || true; fi
		done
	done
done

mkdir -p "$OUT"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
file="$OUT/rls-$stamp.md"
{
	echo "# gateway rls vs envoyproxy/ratelimit ($stamp)"
	echo
	echo "bench/rls/run.sh: ROUNDS=$ROUNDS DURATION=$DURATION CONNS=$CONNS WORKERS=$WORKERS, each service on CPU $PROXY_CPU"
	echo "(GOMAXPROCS=1), Redis and the load client on CPU $LOAD_CPU; $(nproc) CPUs, $(uname -r)."
	echo "envoyproxy/ratelimit $RATELIMIT_VERSION. Medians over the rounds; ratios to envoyproxy/ratelimit."
	echo
	echo "| case | service | decisions/s | × | CPU µs/decision | × | Redis calls sent/decision | Redis commands run/decision | Redis CPU µs/decision | × | admitted | errors |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk -F'\t' -v hz="$hz" '
		function median(s,   a, n, i, j, t) {
			n = split(s, a, " ")
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		}
		{
			k = $1 SUBSEP $2
			rate[k] = rate[k] " " ($3 / $4)
			cpu[k] = cpu[k] " " ($5 / hz * 1e6 / $3)
			cmd[k] = cmd[k] " " ($6 / $3)
			adm[k] = adm[k] " " ($8 / $3)
			snt[k] = snt[k] " " ($9 / $3)
			rc[k] = rc[k] " " ($10 / $3)
			err[k] += $7
			if (!(($1) in seen)) { seen[$1] = 1; cases[++nc] = $1 }
			if (!(($2) in seenn)) { seenn[$2] = 1; names[++nn] = $2 }
		}
		END {
			for (ci = 1; ci <= nc; ci++) {
				c = cases[ci]
				br = median(rate[c SUBSEP "envoy-ratelimit"]); bc = median(cpu[c SUBSEP "envoy-ratelimit"]); brc = median(rc[c SUBSEP "envoy-ratelimit"])
				for (ni = 1; ni <= nn; ni++) {
					n = names[ni]; k = c SUBSEP n
					r = median(rate[k]); u = median(cpu[k]); x = median(rc[k])
					printf "| %s | %s | %.0f | %.2f | %.1f | %.2f | %.3f | %.2f | %.1f | %.2f | %.0f%% | %d |\n", c, n, r, r / br, u, u / bc, median(snt[k]), median(cmd[k]), x, x / brc, 100 * median(adm[k]), err[k]
				}
			}
		}' "$results"
} >"$file"
cat "$file"
echo "wrote $file" >&2
