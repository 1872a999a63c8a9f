#!/usr/bin/env bash
# Syscalls and context switches per request: one or more authproxy binaries, each pinned to core 0, relaying a 2 KB
# JSON from a local nginx (core 1) with an api-key credential injecting a token, under wrk on core 1.
#
#   bash bench/syscalls.sh BINARY [BINARY...] [--duration SECONDS] [--connections C] [--close]
#
# For each binary: `perf stat -e 'syscalls:sys_enter_*',context-switches -p PID` over one wrk run, divided by the
# requests wrk completed. Counts, unlike CPU time, hardly move with other load on the machine, so this is the
# figure to compare for changes that aim at fewer wake-ups. --close sends `Connection: close`, so every request
# comes on a new client connection. Needs perf (Debian linux-perf) and tracefs.
set -euo pipefail

BINS=(); DURATION=5; CONNS=50; CLOSE=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --duration) DURATION="$2"; shift 2 ;;
        --connections) CONNS="$2"; shift 2 ;;
        --close) CLOSE=1; shift ;;
        -*) echo "unknown argument: $1" >&2; exit 2 ;;
        *) BINS+=("$(readlink -f "$1")"); shift ;;
    esac
done
[[ ${#BINS[@]} -ge 1 ]] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

BENCH_TAG="syscalls"
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/pinned.sh"
require_tools wrk nginx taskset python3 perf
start_small_origin
EXTRA=""; [[ $CLOSE -eq 1 ]] && EXTRA=', ["Connection"]="close"'
write_proxy_lua "$EXTRA"

for bin in "${BINS[@]}"; do
    port=$(free_port)
    pid=$(start_bench_proxy "$bin" "$port"); PIDS+=("$pid"); dir="$TMP/p$port"
    curl -sf -x "http://127.0.0.1:$port" "$URL" -o /dev/null
    taskset -c 1 wrk -t1 -c"$CONNS" -d2s -s "$TMP/proxy.lua" "http://127.0.0.1:$port" > /dev/null  # warm-up
    perf stat -x, -e 'syscalls:sys_enter_*' -e context-switches -p "$pid" -o "$dir/perf.csv" &
    perf_pid=$!
    sleep 0.3
    out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$TMP/proxy.lua" "http://127.0.0.1:$port" 2>&1)
    kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    grep -E "Socket errors|Non-2xx" <<<"$out" | sed 's/^ */  wrk: /' || true
    echo "== $bin (c$CONNS$([[ $CLOSE -eq 1 ]] && echo ", Connection: close"), $reqs requests)"
    syscalls_per_request "$dir/perf.csv" "$reqs" --table
    kill "$pid"
done
