#!/usr/bin/env bash
# Per-thread view of one or more authproxy binaries under load: each pinned to core 0, relaying a 2 KB JSON from a
# local nginx (core 1) with an api-key credential, under wrk c50 on core 1.
#
#   bash bench/threads.sh BINARY [BINARY...] [--duration SECONDS] [--connections C]
#
# For each binary and each of its threads (from /proc/PID/task/*, read before and after one wrk run): voluntary
# and involuntary context switches per request, CPU clock ticks over the run and the nice value. Shows which
# thread wakes how often (libdispatch's manager, which waits in epoll, against the event loops' threads) and
# whether the thread count moved. Listens on 127.0.0.1 only.
set -euo pipefail

BINS=(); DURATION=5; CONNS=50
while [[ $# -gt 0 ]]; do
    case "$1" in
        --duration) DURATION="$2"; shift 2 ;;
        --connections) CONNS="$2"; shift 2 ;;
        -*) echo "unknown argument: $1" >&2; exit 2 ;;
        *) BINS+=("$(readlink -f "$1")"); shift ;;
    esac
done
[[ ${#BINS[@]} -ge 1 ]] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

BENCH_TAG="threads"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/pinned.sh"
require_tools wrk nginx taskset python3
start_small_origin
write_proxy_lua ""

# tid name voluntary involuntary cpu-ticks nice, one line per thread of $1.
snapshot() {
    local t
    for t in /proc/"$1"/task/*; do
        printf '%s %s %s %s\n' "${t##*/}" "$(tr ' ' _ < "$t/comm")" \
            "$(awk '/^voluntary_ctxt/ {v=$2} /^nonvoluntary_ctxt/ {n=$2} END {print v, n}' "$t/status")" \
            "$(sed 's/.*) //' "$t/stat" | awk '{print $12+$13, $17}')"
    done | sort
}

for bin in "${BINS[@]}"; do
    port=$(free_port)
    pid=$(start_bench_proxy "$bin" "$port"); PIDS+=("$pid"); dir="$TMP/p$port"
    curl -sf -x "http://127.0.0.1:$port" "$URL" -o /dev/null
    taskset -c 1 wrk -t1 -c"$CONNS" -d2s -s "$TMP/proxy.lua" "http://127.0.0.1:$port" > /dev/null  # warm-up
    snapshot "$pid" > "$dir/before"
    out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$TMP/proxy.lua" "http://127.0.0.1:$port" 2>&1)
    snapshot "$pid" > "$dir/after"
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    echo "== $bin (c$CONNS, $reqs requests, $(wc -l < "$dir/before") threads before, $(wc -l < "$dir/after") after)"
    printf '  %-8s %-18s %10s %10s %6s %5s\n' tid name vol/req invol/req ticks nice
    join "$dir/before" "$dir/after" | awk -v r="$reqs" \
        '{printf "  %-8s %-18s %10.3f %10.3f %6d %5s\n", $1, $2, ($8-$3)/r, ($9-$4)/r, $10-$5, $11}'
    kill "$pid"
done
