# shellcheck shell=bash
# bench/lib.sh — what the bench scripts share; source it after `set -euo
# pipefail`. It makes WORK, a temporary directory removed on exit, and
# pids, the background processes killed on exit (append with pids+=($!)).

WORK=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

# wait_port PORT: wait up to 10s for 127.0.0.1:PORT to accept connections.
wait_port() {
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "port $1 never opened" >&2
	return 1
}
