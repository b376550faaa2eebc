#!/usr/bin/env bash
# bench/run.sh — the gateway against nginx and haproxy on one machine.
#
# Every proxy contender runs on one core (PROXY_CPU, GOMAXPROCS=1, nginx
# worker_processes 1, haproxy nbthread 1); the upstream and the load
# generator (wrk -t1 -cCONNS) share the other core (LOAD_CPU). Contenders
# alternate within each round so that machine noise spreads over all of
# them, in reverse order in even rounds; the table reports medians over the
# rounds and ratios to nginx.
#
#   (a) admitted: every request under its limit (app "bench")
#   (b) limited:  every request over its limit (app "blocked"), answered 429
#   (c) cold:     every request with another key (app "mix", by a header
#                 that bench/cold.lua draws at random from 100,000 values)
#   (d) cold-bucket: the same with a token bucket (app "mixbucket"); the
#                 cold path uses the default algorithm, the sliding window
#
# Besides the memory store, two gateways run on a Redis (redis-server on the
# load's core, its CPU time measured apart): gateway-redis with the defaults
# (batching and leases, see docs/fleet.md) and
# gateway-redis-exact with --redis-batch 1 --redis-leases -1 (one script
# call per request, in a round trip of its own, as before them). For these
# the table also gives the script calls per request (from /metrics) and
# Redis's CPU time per 1,000 requests.
#
# Besides requests/s, each run measures the proxy's CPU time per request:
# the user+sys clock ticks of the contender's process (nginx: its master
# and worker) across the wrk run, over the requests wrk completed. On a
# shared machine it is steadier than requests/s, which drop whenever
# another job takes the proxy's core; the table gives its ratio to bare's.
# It still rises by a tenth or more when other jobs share the machine, so
# each run also records how busy other processes kept the proxy's core,
# and QUIET_WAIT=<seconds> waits, at most that long before each run, for
# the machine to be idle.
#
# BASE_REF=<git ref> adds a contender "gateway-base": the gateway built from
# that commit (git archive into the work directory), run with the same
# flags as "gateway", which is built from the working tree, and
# "gateway-redis-base", that build with gateway-redis's flags (on the
# admitted and cold paths). They then run in every round, so a change is
# measured before and after on one machine in one run.
#
# Usage: bench/run.sh            (or: make bench)
#        BASE_REF=main bench/run.sh
# Tunables (environment): ROUNDS=3 DURATION=10s CONNS=64 PROXY_CPU=0 LOAD_CPU=1 OUT=bench/results BASE_REF=
#   PATHS="admitted limited cold" (the paths to run, e.g. PATHS=cold; also
#   cold-bucket; the ratios to bare need the admitted path)
#   REDIS_TIMEOUT=1s (the Redis contenders' --redis-timeout: on a busy
#   machine the default 25ms lets calls time out, and a call that times out
#   is decided in memory under --fail-mode local, which would flatter the
#   Redis store; the table gives the store errors per request, which must
#   be 0 for its figures to be Redis's)
#   QUIET_WAIT=0
#   TRACES=1 adds gateway-traces-1pct and gateway-traces-all on the admitted
#   and limited paths: the gateway exporting OpenTelemetry traces of 1% and
#   of every request (docs/operations.md, "Traces") to bench/otlpsink on
#   the load's core
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
BASE_REF=${BASE_REF:-}
QUIET_WAIT=${QUIET_WAIT:-0}
TRACES=${TRACES:-0}
REDIS_TIMEOUT=${REDIS_TIMEOUT:-1s}
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/bench/results}
HZ=$(getconf CLK_TCK)

if [ -n "$BASE_REF" ]; then
	base_commit=$(git rev-parse --verify --quiet "$BASE_REF^{commit}") || {
		echo "BASE_REF=$BASE_REF is not a commit of this repository" >&2
		exit 2
	}
fi

need=()
for cmd in nginx haproxy wrk taskset pgrep redis-server curl; do
	command -v "$cmd" >/dev/null || need+=("$cmd")
done
if [ ${#need[@]} -gt 0 ]; then
	pkgs=()
	for cmd in "${need[@]}"; do
		case $cmd in
		taskset) pkgs+=(util-linux) ;;
		pgrep) pkgs+=(procps) ;;
		redis-server) pkgs+=(redis-server) ;;
		*) pkgs+=("$cmd") ;;
		esac
	done
	echo "installing ${pkgs[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi

# shellcheck source=bench/lib.sh
. bench/lib.sh

echo "building" >&2
go build -o "$WORK/upstream" ./bench/upstream
go build -o "$WORK/bareproxy" ./bench/bareproxy
[ "$TRACES" != 1 ] || go build -o "$WORK/otlpsink" ./bench/otlpsink
CGO_ENABLED=0 go build -trimpath -o "$WORK/gateway" ./cmd/gateway
if [ -n "$BASE_REF" ]; then
	echo "building gateway-base from $BASE_REF (${base_commit:0:12})" >&2
	mkdir "$WORK/base"
	git archive "$base_commit" | tar -x -C "$WORK/base"
	(cd "$WORK/base" && CGO_ENABLED=0 go build -trimpath -o "$WORK/gateway-base" ./cmd/gateway)
	rm -rf "$WORK/base" # the rest of WORK goes on exit (bench/lib.sh)
fi

UPSTREAM=127.0.0.1:18081
UPSTREAM2=127.0.0.1:18082 # the second target of gateway-routes' pool
declare -A PORT=([direct]=18081 [bare]=18090 [gateway]=18091 [nginx]=18092 [haproxy]=18093 [gateway-noheaders]=18094
	[gateway-redis]=18096 [gateway-redis-exact]=18097 [gateway-routes]=18098)
# The admin port of the Redis contenders, for their script calls.
declare -A ADMIN=([gateway-redis]=19096 [gateway-redis-exact]=19097)
REDIS_PORT=18379
if [ -n "$BASE_REF" ]; then
	PORT[gateway-base]=18095 PORT[gateway-redis-base]=18099 ADMIN[gateway-redis-base]=19099
fi
if [ "$TRACES" = 1 ]; then
	PORT[gateway-traces-1pct]=18100 PORT[gateway-traces-all]=18101
fi
declare -A PID # contender -> the process whose CPU time is measured

start() { # start NAME CPU CMD... — run pinned in the background
	local name=$1 cpu=$2
	shift 2
	GOMAXPROCS=1 taskset -c "$cpu" "$@" >"$WORK/$name.log" 2>&1 &
	pids+=($!)
	PID[$name]=$! # taskset execs the command: this is its pid
}

start upstream "$LOAD_CPU" "$WORK/upstream" -listen "$UPSTREAM"
start upstream2 "$LOAD_CPU" "$WORK/upstream" -listen "$UPSTREAM2"
start redis "$LOAD_CPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$WORK" --maxmemory 512mb --maxmemory-policy noeviction
wait_port "$REDIS_PORT"
start bare "$PROXY_CPU" "$WORK/bareproxy" -listen "127.0.0.1:${PORT[bare]}" -upstream "http://$UPSTREAM"
start gateway "$PROXY_CPU" "$WORK/gateway" serve --config bench/rules.yaml --upstream "http://$UPSTREAM" \
	--listen "127.0.0.1:${PORT[gateway]}" --admin-listen 127.0.0.1:19091 --log-level warn --watch=false
# The same gateway without rate-limit headers: the difference to "gateway"
# is the cost of the five headers, to "bare" the cost of limiting itself.
start gateway-noheaders "$PROXY_CPU" "$WORK/gateway" serve --config bench/rules.yaml --upstream "http://$UPSTREAM" \
	--listen "127.0.0.1:${PORT[gateway-noheaders]}" --admin-listen 127.0.0.1:19094 --log-level warn --watch=false \
	--ratelimit-headers none
# The same gateway with a route to a pool of two targets instead of
# --upstream (docs/routes.md): the difference to "gateway" is the cost of
# routing and balancing.
{
	printf 'upstreams: [{name: users, targets: [http://%s, http://%s]}]\n' "$UPSTREAM" "$UPSTREAM2"
	printf 'routes: [{path: /v1, upstream: users}]\n'
	cat bench/rules.yaml
} >"$WORK/routes.yaml"
start gateway-routes "$PROXY_CPU" "$WORK/gateway" serve --config "$WORK/routes.yaml" \
	--listen "127.0.0.1:${PORT[gateway-routes]}" --admin-listen 127.0.0.1:19098 --log-level warn --watch=false
for c in gateway-redis gateway-redis-exact; do
	extra=()
	[ "$c" = gateway-redis ] || extra=(--redis-batch 1 --redis-leases -1)
	start "$c" "$PROXY_CPU" "$WORK/gateway" serve --config bench/rules.yaml --upstream "http://$UPSTREAM" \
		--listen "127.0.0.1:${PORT[$c]}" --admin-listen "127.0.0.1:${ADMIN[$c]}" --log-level warn --watch=false \
		--store redis --redis-url "redis://127.0.0.1:$REDIS_PORT/0" --redis-timeout "$REDIS_TIMEOUT" "${extra[@]}"
done
if [ "$TRACES" = 1 ]; then
	OTLP=127.0.0.1:14318
	start otlpsink "$LOAD_CPU" "$WORK/otlpsink" -listen "$OTLP"
	for c in gateway-traces-1pct gateway-traces-all; do
		ratio=1
		[ "$c" = gateway-traces-all ] || ratio=0.01
		start "$c" "$PROXY_CPU" env OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT="http://$OTLP" \
			OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG="$ratio" \
			"$WORK/gateway" serve --config bench/rules.yaml --upstream "http://$UPSTREAM" \
			--listen "127.0.0.1:${PORT[$c]}" --admin-listen "127.0.0.1:$((PORT[$c] + 1000))" --log-level warn --watch=false
	done
fi
if [ -n "$BASE_REF" ]; then
	start gateway-base "$PROXY_CPU" "$WORK/gateway-base" serve --config bench/rules.yaml --upstream "http://$UPSTREAM" \
		--listen "127.0.0.1:${PORT[gateway-base]}" --admin-listen 127.0.0.1:19095 --log-level warn --watch=false
	start gateway-redis-base "$PROXY_CPU" "$WORK/gateway-base" serve --config bench/rules.yaml --upstream "http://$UPSTREAM" \
		--listen "127.0.0.1:${PORT[gateway-redis-base]}" --admin-listen "127.0.0.1:${ADMIN[gateway-redis-base]}" \
		--log-level warn --watch=false --store redis --redis-url "redis://127.0.0.1:$REDIS_PORT/0" --redis-timeout "$REDIS_TIMEOUT"
fi

mkdir -p "$WORK"/{body,proxy,fastcgi,uwsgi,scgi}
sed -e "s|@DIR@|$WORK|g" bench/nginx.conf.tmpl >"$WORK/nginx.conf"
start nginx "$PROXY_CPU" nginx -c "$WORK/nginx.conf" -e "$WORK/nginx-error.log"
start haproxy "$PROXY_CPU" haproxy -f bench/haproxy.cfg
for name in "${!PORT[@]}"; do wait_port "${PORT[$name]}"; done

# cpu_ticks PID: user+sys clock ticks (fields 14 and 15 of /proc/PID/stat)
# of PID and all its descendants, so that nginx's worker counts.
cpu_ticks() {
	local total=0 p stat f todo=("$1")
	while [ ${#todo[@]} -gt 0 ]; do
		p=${todo[0]}
		todo=("${todo[@]:1}")
		stat=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		read -ra f <<<"${stat##*) }" # fields from 3 on: comm may hold spaces
		total=$((total + f[11] + f[12]))
		mapfile -t -O "${#todo[@]}" todo < <(pgrep -P "$p")
	done
	echo "$total"
}

# stat_ticks CPU: the busy and the total clock ticks of CPU ("cpu" for the
# whole machine, "cpu0" for core 0) in /proc/stat.
stat_ticks() { awk -v c="$1" '$1 == c { print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9 }' /proc/stat; }

# wait_quiet: wait, at most QUIET_WAIT seconds, until the whole machine is
# under 10% busy over half a second.
wait_quiet() {
	local end=$((SECONDS + QUIET_WAIT)) b0 n0 b1 n1
	while ((SECONDS < end)); do
		read -r b0 n0 < <(stat_ticks cpu)
		sleep 0.5
		read -r b1 n1 < <(stat_ticks cpu)
		if (((b1 - b0) * 10 < n1 - n0)); then return 0; fi
	done
	return 0
}

# script_calls CONTENDER: the Redis contender's gateway_redis_calls_total
# and its store errors (gateway_store_errors_total, every store).
script_calls() {
	curl -fsS "http://127.0.0.1:${ADMIN[$1]}/metrics" | awk '
		$1 == "gateway_redis_calls_total" { c = $2 }
		$1 ~ /^gateway_store_errors_total/ { e += $2 }
		END { printf "%d %d", c, e }'
}

# wrk_args PATH: sets args to the arguments of wrk that make PATH's
# requests.
wrk_args() {
	case $1 in
	cold | cold-bucket)
		export COLD_APP=${APP[$1]}
		args=(-s bench/cold.lua)
		;;
	*) args=(-H "X-App-Id: ${APP[$1]}") ;;
	esac
}

# run_wrk CONTENDER PATH -> "rps p50ms p99ms non2xx cpu_us_per_request other% calls/request redis_ms/1000 store_errors/request own%"
# cpu is "-" for direct, which has no proxy process; other% is how much of
# the proxy's core other processes took during the run; calls/request,
# redis_ms/1000 and store_errors/request are "-" but for the Redis
# contenders; own% is how much of its core the proxy itself kept busy
# ("-" for direct): under 100, it waited with its core idle, so its
# requests/s were bound by latency (CONNS requests in flight), not by its
# CPU.
run_wrk() {
	local out t0=0 t1=0 pid=${PID[$1]:-} b0 n0 b1 n1 r0=0 r1=0 c0=0 c1=0 e0=0 e1=0 redis='' args
	[ -z "${ADMIN[$1]:-}" ] || redis=1
	read -r b0 n0 < <(stat_ticks "cpu$PROXY_CPU")
	[ -z "$pid" ] || t0=$(cpu_ticks "$pid")
	[ -z "$redis" ] || { r0=$(cpu_ticks "${PID[redis]}"); read -r c0 e0 < <(script_calls "$1"); }
	wrk_args "$2"
	out=$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"$DURATION" --latency \
		"${args[@]}" "http://127.0.0.1:${PORT[$1]}/v1/user/42")
	[ -z "$pid" ] || t1=$(cpu_ticks "$pid")
	[ -z "$redis" ] || { r1=$(cpu_ticks "${PID[redis]}"); read -r c1 e1 < <(script_calls "$1"); }
	read -r b1 n1 < <(stat_ticks "cpu$PROXY_CPU")
	awk -v ticks=$((t1 - t0)) -v hz="$HZ" -v measured="${pid:+1}" -v redis="$redis" \
		-v rticks=$((r1 - r0)) -v calls=$((c1 - c0)) -v errs=$((e1 - e0)) \
		-v other=$(((b1 - b0 - (t1 - t0)) * 100 / (n1 - n0 + 1))) -v total=$((n1 - n0 + 1)) '
		function ms(v) {
			if (v ~ /us$/) return substr(v, 1, length(v)-2) / 1000
			if (v ~ /ms$/) return substr(v, 1, length(v)-2) + 0
			if (v ~ /s$/)  return substr(v, 1, length(v)-1) * 1000
			return v
		}
		/ requests in / { n = $1 }
		/Requests\/sec:/ { rps = $2 }
		$1 == "50%" { p50 = ms($2) }
		$1 == "99%" { p99 = ms($2) }
		/Non-2xx or 3xx responses:/ { bad = $5 }
		END {
			cpu = (measured && n > 0) ? sprintf("%.2f", ticks * 1e6 / hz / n) : "-"
			cpr = (redis && n > 0) ? sprintf("%.4f", calls / n) : "-"
			rcpu = (redis && n > 0) ? sprintf("%.1f", rticks * 1e3 / hz / n * 1000) : "-"
			epr = (redis && n > 0) ? sprintf("%.4f", errs / n) : "-"
			own = measured ? sprintf("%.1f", ticks * 100 / total) : "-"
			printf "%.0f %.3f %.3f %d %s %d %s %s %s %s\n", rps, p50, p99, bad, cpu, (other < 0 ? 0 : other), cpr, rcpu, epr, own
		}
	' <<<"$out"
}

declare -A RESULTS
read -ra paths <<<"${PATHS:-admitted limited cold}"
for path in "${paths[@]}"; do
	case $path in
	admitted | limited | cold | cold-bucket) ;;
	*)
		echo "bench/run.sh: unknown path \"$path\" in PATHS (admitted, limited, cold, cold-bucket)" >&2
		exit 2
		;;
	esac
done
declare -A CONTENDERS=([admitted]="direct nginx haproxy bare gateway gateway-routes gateway-noheaders gateway-redis gateway-redis-exact"
	[limited]="nginx haproxy gateway gateway-noheaders gateway-redis gateway-redis-exact"
	[cold]="gateway gateway-redis gateway-redis-exact"
	[cold-bucket]="gateway gateway-redis gateway-redis-exact")
if [ -n "$BASE_REF" ]; then
	for path in "${paths[@]}"; do
		CONTENDERS[$path]=${CONTENDERS[$path]/gateway /gateway gateway-base }
	done
	CONTENDERS[admitted]+=" gateway-redis-base"
	CONTENDERS[cold]+=" gateway-redis-base"
	CONTENDERS[cold-bucket]+=" gateway-redis-base"
fi
if [ "$TRACES" = 1 ]; then
	CONTENDERS[admitted]+=" gateway-traces-1pct gateway-traces-all"
	CONTENDERS[limited]+=" gateway-traces-1pct gateway-traces-all"
fi
# run_order PATH: the contenders of PATH (in the order of its tables) in
# the order they run in in odd rounds (reversed in even ones), where the
# pairs that paired compares run next to each other: gateway-redis right
# after gateway, and gateway-redis-base and gateway-base last.
run_order() {
	local list=" ${CONTENDERS[$1]} " c out=()
	for c in $list; do
		case $c in
		gateway-redis | gateway-redis-base | gateway-base) ;;
		*) out+=("$c") ;;
		esac
		[[ $c != gateway || $list != *" gateway-redis "* ]] || out+=(gateway-redis)
	done
	for c in gateway-redis-base gateway-base; do
		[[ $list != *" $c "* ]] || out+=("$c")
	done
	echo "${out[*]}"
}
declare -A APP=([admitted]=bench [limited]=blocked [cold]=mix [cold-bucket]=mixbucket)

for round in $(seq "$ROUNDS"); do
	for path in "${paths[@]}"; do
		read -ra order <<<"$(run_order "$path")"
		if ((round % 2 == 0)); then
			for ((i = 0, j = ${#order[@]} - 1; i < j; i++, j--)); do
				c=${order[i]} order[i]=${order[j]} order[j]=$c
			done
		fi
		for c in "${order[@]}"; do
			wait_quiet
			wrk_args "$path"
			taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d1s "${args[@]}" \
				"http://127.0.0.1:${PORT[$c]}/v1/user/42" >/dev/null # warm up
			r=$(run_wrk "$c" "$path")
			echo "round $round $path $c: $r" >&2
			RESULTS[$path/$c]+="$r"$'\n'
		done
	done
done

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'; }
# field PATH CONTENDER N: the median of field N over the rounds.
field() { printf '%s' "${RESULTS[$1/$2]:-}" | awk -v n="$3" '{ print $n }' | median; }
ratio() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf f, a / b }'; }
# paired PATH A B [N]: the median over the rounds of A's field N
# (default 1, requests/s) over B's in the same round. A and B run next to
# each other in every round (run_order), so a machine that slows down for
# a round or two (other jobs, or the host's, which a VM cannot see) moves
# both, where the ratio of their medians can pair a fast round of one
# with a slow round of the other.
paired() {
	local n=${4:-1}
	paste -d' ' <(printf '%s' "${RESULTS[$1/$2]:-}" | awk -v n="$n" '{ print $n }') \
		<(printf '%s' "${RESULTS[$1/$3]:-}" | awk -v n="$n" '{ print $n }') |
		awk '$1 != "-" && $2 > 0 { printf "%.4f\n", $1 / $2 }' | "${5:-median}" | awk 'NF { printf "%.3f", $1 }'
}
# middle PATH A B [N]: paired's spread, the middle half of the rounds'
# ratios ("q1–q3", by nearest rank): how much the rounds of one run
# disagree, which a median alone hides.
middle() {
	local lo hi
	lo=$(paired "$1" "$2" "$3" "${4:-1}" quartile1)
	hi=$(paired "$1" "$2" "$3" "${4:-1}" quartile3)
	[ -z "$lo" ] || echo "$lo–$hi"
}
quartile1() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 3) / 4)] }'; }
quartile3() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((3 * NR + 3) / 4)] }'; }

# memory_of C: the contender on the memory store of Redis contender C's
# build, which paired divides it by.
memory_of() { if [ "$1" = gateway-redis-base ]; then echo gateway-base; else echo gateway; fi; }

mkdir -p "$OUT"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
file="$OUT/$stamp.md"
{
	echo "# gateway benchmark, $stamp"
	echo
	echo "Machine: $(nproc) cores, $(awk -F: '/model name/ { print $2; exit }' /proc/cpuinfo | sed 's/^ *//'), $(uname -sr)."
	echo "Proxies on core $PROXY_CPU (GOMAXPROCS=1, nginx worker_processes 1, haproxy nbthread 1);"
	echo "upstream and \`wrk -t1 -c$CONNS -d$DURATION\` on core $LOAD_CPU. Medians of $ROUNDS alternating rounds."
	if [ -n "$BASE_REF" ]; then
		dirty=
		[ -z "$(git status --porcelain --untracked-files=no)" ] || dirty=", with uncommitted changes"
		echo "gateway = the working tree ($(git rev-parse --short=12 HEAD)$dirty); gateway-base = $BASE_REF (${base_commit:0:12})."
	fi
	# direct leaves the core to others: only the proxies' runs count.
	other=$(for k in "${!RESULTS[@]}"; do [ "$k" = admitted/direct ] || printf '%s' "${RESULTS[$k]}"; done |
		awk '{ print $6 }' | sort -n |
		awk '{ v[NR] = $1 } END { printf "median %d%%, max %d%%", v[int((NR+1)/2)], v[NR] }')
	echo "Other processes took $other of the proxies' core during the runs (QUIET_WAIT=$QUIET_WAIT)."
	echo "$(nginx -v 2>&1 | sed 's/.*version: //'), $(haproxy -v | head -1 | awk '{ print "haproxy " $3 }'), $(go version | awk '{ print $3 }')."
	bare_cpu=$(field admitted bare 5)
	for path in "${paths[@]}"; do
		echo
		case $path in
		admitted) echo "## Admitted: every request under its limit" ;;
		limited) echo "## Limited: every request over its limit" ;;
		cold) echo "## Cold keys: every request under its limit, with a key drawn from 100,000" ;;
		cold-bucket) echo "## Cold keys, token bucket: the same with app \"mixbucket\"" ;;
		esac
		echo
		echo "| contender | requests/s | CPU µs/request | CPU / bare | p50 ms | p99 ms | ratio to nginx | non-2xx |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|"
		nginx_rps=-
		[ -z "${RESULTS[$path/nginx]:-}" ] || nginx_rps=$(field "$path" nginx 1)
		for c in ${CONTENDERS[$path]}; do
			rps=$(field "$path" "$c" 1)
			cpu=-
			[ "$c" = direct ] || cpu=$(field "$path" "$c" 5)
			echo "| $c | $rps | $cpu | $(ratio "$cpu" "$bare_cpu" %.2f) | $(field "$path" "$c" 2) | $(field "$path" "$c" 3) | $(ratio "$rps" "$nginx_rps" %.2f) | $(field "$path" "$c" 4) |"
		done
	done
	echo
	echo "direct = the upstream without a proxy; bare = httputil.ReverseProxy with the gateway's Transport and no limiting;"
	echo "gateway-noheaders = the gateway with --ratelimit-headers none; gateway-routes = the gateway with a route to a pool of two"
	echo "targets (the upstream and a second one on core $LOAD_CPU) instead of --upstream."
	[ "$TRACES" != 1 ] || echo "gateway-traces-1pct, gateway-traces-all = the gateway exporting OpenTelemetry traces of 1% and of every request over OTLP/HTTP to bench/otlpsink on core $LOAD_CPU."
	echo "CPU µs/request = user+sys time of the proxy's process (nginx: master and worker) during the wrk run / requests completed;"
	echo "CPU / bare divides by bare's admitted median on both paths (bare forwards every request: it does not limit)."
	echo
	echo "## The Redis store against the memory store"
	echo
	echo "| path | contender | requests/s | / gateway (memory) | paired | paired, middle half | CPU µs/request | paired CPU | paired CPU, middle half | core busy % | memory's core busy % | script calls/request | Redis CPU ms / 1,000 requests | store errors/request |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for path in "${paths[@]}"; do
		mem=$(field "$path" gateway 1)
		for c in gateway-redis gateway-redis-exact ${BASE_REF:+gateway-redis-base}; do
			[ -n "${RESULTS[$path/$c]:-}" ] || continue
			m=$(memory_of "$c")
			echo "| $path | $c | $(field "$path" "$c" 1) | $(ratio "$(field "$path" "$c" 1)" "$mem" %.3f) | $(paired "$path" "$c" "$m") | $(middle "$path" "$c" "$m") | $(field "$path" "$c" 5) | $(paired "$path" "$m" "$c" 5) | $(middle "$path" "$m" "$c" 5) | $(field "$path" "$c" 10) | $(field "$path" "$m" 10) | $(field "$path" "$c" 7) | $(field "$path" "$c" 8) | $(field "$path" "$c" 9) |"
		done
	done
	echo
	echo "gateway-redis = --store redis with its defaults (batching, leases); gateway-redis-exact = --redis-batch 1 --redis-leases -1."
	echo "/ gateway (memory) divides the medians of requests/s; paired is the median over the rounds of the ratio within each round"
	echo "to the memory store of the same build (gateway-base for gateway-redis-base), which ran next to it; paired CPU is the"
	echo "same for CPU per request, the memory store's over the Redis store's (so that, like paired, 1 is the memory store's cost)."
	echo "middle half: where the middle half of those rounds' ratios lie (first to third quartile, by nearest rank): how much"
	echo "the rounds disagree. A wide one says the machine moved under the run, and that paired may differ in another."
	echo "core busy % is the share of its core the contender's process kept busy (memory's: that of its memory store):"
	echo "a contender under 100 had its core idle while its CONNS requests waited (on Redis, the upstream or wrk), so its"
	echo "requests/s were bound by latency, not by its CPU; paired CPU then tells what its CPU would serve."
	[ -z "$BASE_REF" ] || echo "gateway-redis-base = gateway-base with gateway-redis's flags, on the same Redis."
	echo "redis-server runs on core $LOAD_CPU; its CPU time is measured apart from the proxy's. The Redis contenders run with"
	echo "--redis-timeout $REDIS_TIMEOUT; a store error is a call decided by --fail-mode (in memory), not by Redis."
	if [ -n "${RESULTS[admitted/bare]:-}" ]; then # the ratios to bare need the admitted path
		gateways="gateway${BASE_REF:+ gateway-base} gateway-noheaders"
		bare=$(field admitted bare 1)
		for c in $gateways; do
			echo "Admitted, $c / bare: $(ratio "$(field admitted "$c" 1)" "$bare" %.3f)."
		done
		for c in $gateways; do
			limited=
			[ -z "${RESULTS[limited/$c]:-}" ] || limited=", limited $(ratio "$(field limited "$c" 5)" "$bare_cpu" %.3f)"
			echo "CPU per request, $c / bare: admitted $(ratio "$(field admitted "$c" 5)" "$bare_cpu" %.3f)$limited."
		done
		echo "CPU per request admitted, gateway-routes (a route to a pool of two targets) / gateway (--upstream): $(ratio "$(field admitted gateway-routes 5)" "$(field admitted gateway 5)" %.3f)."
	fi
	echo
	echo "## Rounds"
	echo
	echo "Each run, in the order of the rounds: requests/s, p50 ms, p99 ms, non-2xx, CPU µs/request, other processes' share"
	echo "of the proxies' core (%), script calls/request, Redis CPU ms / 1,000 requests, store errors/request, the proxy's"
	echo "own share of its core (%)."
	echo
	echo '```'
	for path in "${paths[@]}"; do
		for c in ${CONTENDERS[$path]}; do
			printf '%s' "${RESULTS[$path/$c]}" | awk -v p="$path" -v c="$c" '{ print p, c ":", $0 }'
		done
	done
	echo '```'
} >"$file"
cat "$file"
echo "written to $file" >&2
