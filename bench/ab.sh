#!/usr/bin/env bash
# A/B: two authproxy binaries, interleaved, on the same single core, relaying a 2 KB JSON from a local nginx
# with an api-key credential injecting a token into every request.
#
#   bash bench/ab.sh OLD_BINARY NEW_BINARY [--rounds N] [--duration SECONDS] [--connections C] [--admin-b]
#                    [--workers-a N] [--workers-b N] [--credentials-a N] [--credentials-b N]
#
# --workers-a/--workers-b set `[proxy] workers` of A/B (default: the binary's default); pass the same binary twice
# to compare event-loop counts:  bash bench/ab.sh BIN BIN --workers-a 2 --workers-b 4
# --credentials-a/--credentials-b declare that many api-key credentials, the matched one last (BENCH_CREDENTIALS in
# bench/pinned.sh); pass the same binary twice to see what matching costs:
#   bash bench/ab.sh BIN BIN --credentials-a 1 --credentials-b 10000
# --admin-b starts B with the admin listener on ([admin] on a free loopback port: metrics recorded per request),
# A without it; pass the same binary twice to measure what the metrics cost (issue 12):
#   bash bench/ab.sh BIN BIN --admin-b
# At the end it scrapes B's /metrics and compares authproxy_requests_total with the requests wrk completed
# through B (plus start_bench_proxy's /healthz poll and check request). Without it neither instance has an admin
# listener.
#
# Each round runs wrk (c50, then c1) through A, then through B (B first in even rounds); the proxy is pinned to
# core 0, nginx and wrk to core 1. Prints req/s, CPU µs per request (utime+stime of the proxy from /proc over the
# run, divided by the requests wrk completed) and c1 latency per round, then the medians. Use an even number of
# rounds. Listens on 127.0.0.1 only.
set -euo pipefail

[[ $# -ge 2 ]] || { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
A_BIN="$(readlink -f "$1")"; B_BIN="$(readlink -f "$2")"; shift 2
ROUNDS=3; DURATION=8; CONNS=50; ADMIN_B=0; WORKERS_A=""; WORKERS_B=""; CREDS_A=1; CREDS_B=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --connections) CONNS="$2"; shift 2 ;;
        --admin-b) ADMIN_B=1; shift ;;
        --workers-a) WORKERS_A="$2"; shift 2 ;;
        --workers-b) WORKERS_B="$2"; shift 2 ;;
        --credentials-a) CREDS_A="$2"; shift 2 ;;
        --credentials-b) CREDS_B="$2"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
source "$(dirname "${BASH_SOURCE[0]}")/pinned.sh"
require_tools wrk nginx taskset python3
start_small_origin
A_PORT=$(free_port); B_PORT=$(free_port)
A_PID=$(BENCH_CREDENTIALS=$CREDS_A BENCH_WORKERS=$WORKERS_A start_bench_proxy "$A_BIN" "$A_PORT"); PIDS+=("$A_PID")
B_PID=$(BENCH_CREDENTIALS=$CREDS_B BENCH_WORKERS=$WORKERS_B BENCH_ADMIN=$ADMIN_B start_bench_proxy "$B_BIN" "$B_PORT"); PIDS+=("$B_PID")
if [[ "$ADMIN_B" == 1 ]]; then echo "B: admin listener on 127.0.0.1:$(cat "$TMP/p$B_PORT/admin_port") (metrics on); A: none"; fi

TICK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# Routes wrk through the proxy: absolute-form requests to the proxy's port.
write_proxy_lua
run() {  # pid port conns -> "reqs_per_s cpu_us_per_req p50_us p99_us requests"
    local pid="$1" port="$2" c="$3" t0 t1 out reqs rps p50 p99
    t0=$(cpu_ticks "$pid")
    out=$(taskset -c 1 wrk -t1 -c"$c" -d"${DURATION}s" --latency -s "$TMP/proxy.lua" "http://127.0.0.1:$port" 2>&1)
    t1=$(cpu_ticks "$pid")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p50=$(awk '$1=="50%" {print $2}' <<<"$out")
    p99=$(awk '$1=="99%" {print $2}' <<<"$out")
    python3 - "$rps" "$reqs" "$t0" "$t1" "$TICK" "$p50" "$p99" <<'PY'
import sys
rps, reqs, t0, t1, tick, p50, p99 = sys.argv[1:]
def us(s):
    for suf, m in (("us", 1), ("ms", 1e3), ("s", 1e6)):
        if s.endswith(suf): return float(s[:-len(suf)]) * m
    return float(s)
print("%.0f %.1f %.0f %.0f %d" % (float(rps), (int(t1) - int(t0)) * 1e6 / int(tick) / max(1, int(reqs)), us(p50), us(p99), int(reqs)))
PY
}
printf "%-6s %-2s %10s %12s %10s %10s %10s\n" round AB "req/s c$CONNS" "CPU us/req" "c1 req/s" "c1 p50 us" "c1 p99 us"
: > "$TMP/results"
B_REQS=2  # start_bench_proxy's /healthz poll and check request (both counted in authproxy_requests_total)
for r in $(seq 1 "$ROUNDS"); do
    # Alternate which binary goes first (A B, B A, ...): in A-first runs here B came out ahead whichever binary it was.
    order="A B"; (( r % 2 == 0 )) && order="B A"
    for ab in $order; do
        if [[ $ab == A ]]; then pid=$A_PID; port=$A_PORT; else pid=$B_PID; port=$B_PORT; fi
        read -r rps cpu _ _ n <<<"$(run "$pid" "$port" "$CONNS")"
        read -r rps1 _ p50 p99 n1 <<<"$(run "$pid" "$port" 1)"
        if [[ $ab == B ]]; then B_REQS=$((B_REQS + n + n1)); fi
        printf "%-6s %-2s %10s %12s %10s %10s %10s\n" "$r" "$ab" "$rps" "$cpu" "$rps1" "$p50" "$p99"
        echo "$ab $rps $cpu $rps1 $p50 $p99" >> "$TMP/results"
    done
done
echo "medians (A = $A_BIN, B = $B_BIN):"
python3 - "$TMP/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for ab in "AB":
    cols = list(zip(*[[float(x) for x in r[1:]] for r in rows if r[0] == ab]))
    m = [statistics.median(c) for c in cols]
    print("  %s: %.0f req/s, %.1f CPU us/req, c1 %.0f req/s p50 %.0f us p99 %.0f us" % (ab, *m))
# A and B of one round ran back to back, so their ratio cancels most of the drift between rounds.
a = [float(r[2]) for r in rows if r[0] == "A"]
b = [float(r[2]) for r in rows if r[0] == "B"]
ratios = sorted(y / x for x, y in zip(a, b))
print("  CPU us/req B/A per round: %s; median %.3f" % (" ".join("%.3f" % r for r in ratios), statistics.median(ratios)))
PY
if [[ "$ADMIN_B" == 1 ]]; then
    # wrk counts the responses it read; requests in flight when a run's time is up reach the proxy too (and are
    # counted there, as 2xx or as 499), so the scrape may exceed wrk's total by up to the connections per run.
    M=$(metrics_requests_total "$TMP/p$B_PORT")
    echo "B /metrics: authproxy_requests_total = $M; wrk completed $B_REQS through B (incl. /healthz and the check request); difference $((M - B_REQS))"
    curl -sf --noproxy '*' --max-time 10 "http://127.0.0.1:$(cat "$TMP/p$B_PORT/admin_port")/metrics" \
        | grep -E '^authproxy_requests_total[{ ]' | sed 's/^/  /'
fi
