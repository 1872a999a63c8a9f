#!/usr/bin/env bash
# Instructions (callgrind Ir) per keep-alive request through authproxy: a count that stays put when the shared
# machine is noisy, for A/B checks of per-request CPU that wall-clock benches cannot resolve.
#
#   bash bench/irperrequest.sh BINARY [--requests N] [--warmup N] [--profile K] [--admin] [--credentials N]
#                              [--cluster] [--hosts N]
#
# --hosts N spreads the requests round robin over N upstream hosts (the origin listens on 127.0.0.1, 127.0.1.1,
# 127.0.1.2, …, one port; the credential matches them all; BENCH_HOSTS in bench/pinned.sh), each kept alive in the
# proxy's pool from the warm-up on (which is raised to N requests at least; the counted requests are sent on the
# event loop the warm-up used, each loop having a pool of its own): what a pool of N destinations costs per request
# (issue 39: 1,000 hosts). --hosts 1 (the default) is the run without it.
# --cluster starts a redis-server on a free loopback port (core 1) and turns on [cluster] with it: what the fleet
# costs per request while the token is valid (issue 39: no Redis round trip on the request path). The Redis
# commands the proxy sent during the counted requests are printed (from INFO commandstats).
# --credentials N declares N api-key credentials, the matched one last (BENCH_CREDENTIALS in bench/pinned.sh): what
# matching costs per request with many credentials (issue 39).
# --profile K also prints the K functions with the most Ir per request (self cost, callgrind_annotate), and keeps
# the annotation and the raw dump as /tmp/irperrequest-annotate.txt and /tmp/irperrequest-callgrind.out (for
# callgrind_annotate --inclusive=yes, or to diff two runs).
# --admin turns on the admin listener ([admin] on a free loopback port, so the per-request metrics are recorded;
# see ProxyMetrics) and checks that authproxy_requests_total on /metrics grew by exactly --requests over the run
# (scraped before the counters are zeroed and after they are dumped, so the scrapes are not counted).
#
# The nginx origin of bench/pinned.sh (core 1) serves small.json; BINARY runs under valgrind --tool=callgrind
# (core 0) with the api-key credential of the benches (a token injected into every request). One curl process
# (core 1) sends --warmup requests (default 200) on one keep-alive connection, the counters are zeroed, a second
# curl sends --requests (default 2000) on one connection, and the counters are dumped: Ir per request = the
# dump's total ÷ requests (everything the proxy's threads executed in user space: authproxy, Swift runtime,
# libdispatch, libcurl, libc; not the kernel). Repeat runs of one binary agree to ~0.05 %.
# valgrind 3.19 cannot read this toolchain's DWARF 5, so a copy with the debug sections stripped is measured
# (symbols stay), with bench/valgrind/sigsuspend_copy.c preloaded (see there: valgrind aborts in dispatchMain()
# otherwise). Listens on 127.0.0.1 only.
set -euo pipefail
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN=""; N=2000; WARM=200; PROFILE=0; ADMIN=0; CREDS=1; CLUSTER=0; HOSTS=1
if [[ $# -gt 0 && "$1" != -* ]]; then BIN="$(readlink -f "$1")"; shift; fi
while [[ $# -gt 0 ]]; do
    case "$1" in
        --requests) N="$2"; shift 2 ;;
        --warmup) WARM="$2"; shift 2 ;;
        --profile) PROFILE="$2"; shift 2 ;;
        --admin) ADMIN=1; shift ;;
        --credentials) CREDS="$2"; shift 2 ;;
        --cluster) CLUSTER=1; shift ;;
        --hosts) HOSTS="$2"; shift 2 ;;
        -h|--help) sed -n '2,36p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -n "$BIN" && -x "$BIN" ]] || { echo "usage: bash bench/irperrequest.sh BINARY [--requests N] [--warmup N] [--profile K] [--admin]" >&2; exit 2; }
[[ "$N" =~ ^[0-9]+$ && "$N" -ge 1 && "$WARM" =~ ^[0-9]+$ && "$WARM" -ge 1 ]] || { echo "--requests and --warmup take positive integers" >&2; exit 2; }
[[ "$HOSTS" =~ ^[0-9]+$ && "$HOSTS" -ge 1 && "$HOSTS" -le 5000 ]] || { echo "--hosts takes 1 to 5000" >&2; exit 2; }
((WARM >= HOSTS)) || WARM=$HOSTS
need=()
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need+=(nginx-light)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v objcopy >/dev/null 2>&1 || need+=(binutils)
if [[ "$CLUSTER" == 1 ]]; then command -v redis-server >/dev/null 2>&1 || need+=(redis-server); fi
if [[ ${#need[@]} -gt 0 ]]; then apt-get install -y "${need[@]}" >/dev/null; fi

# shellcheck source=bench/pinned.sh
export BENCH_HOSTS=$HOSTS
source "$BENCH_DIR/pinned.sh"
objcopy --strip-debug "$BIN" "$TMP/authproxy"
cc -O2 -shared -fPIC "$BENCH_DIR/valgrind/sigsuspend_copy.c" -o "$TMP/sigsuspend_copy.so"
start_small_origin
PORT=$(free_port)
BENCH_CREDENTIALS=$CREDS BENCH_ADMIN=$ADMIN write_bench_proxy_conf "$TMP/p" "$PORT"
# Notice level (no per-request lines) so that the start-up's last line can be waited for: under valgrind the work
# after the listeners open (one digest per credential for the token cache) takes seconds with many credentials,
# and must not fall inside the counted requests.
sed -i 's/^level = "warning"$/level = "notice"/' "$TMP/p/proxy.conf"
if [[ "$CLUSTER" == 1 ]]; then
    RPORT=$(free_port)
    taskset -c 1 redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        > "$TMP/redis.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    # [proxy] state_key is what [cluster] needs (tokens in Redis are encrypted with it).
    sed -i "s|^state_dir = .*|&\nstate_key = \"$(head -c 32 /dev/urandom | base64 | tr -d '\n')\"|" "$TMP/p/proxy.conf"
    printf '[cluster]\nredis = "redis://127.0.0.1:%s/0"\n' "$RPORT" >> "$TMP/p/proxy.conf"
fi
LD_PRELOAD="$TMP/sigsuspend_copy.so" taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.%p.out" \
    "$TMP/authproxy" serve --config "$TMP/p/proxy.conf" > "$TMP/p/log" 2>&1 &
VPID=$!; PIDS+=("$VPID")
for _ in $(seq 1 600); do
    curl -s --noproxy '*' -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/healthz" && break
    kill -0 "$VPID" 2>/dev/null || { cat "$TMP/p/log" >&2; echo "authproxy under valgrind exited" >&2; exit 1; }
    sleep 0.2
done
for _ in $(seq 1 1200); do grep -q "authproxy started" "$TMP/p/log" && break; sleep 0.2; done
grep -q "authproxy started" "$TMP/p/log" || { echo "authproxy under valgrind did not finish starting" >&2; exit 1; }
# Connections the origin accepted so far (nginx stub_status on a port of its own).
origin_accepts() { curl -s --noproxy '*' --max-time 5 "http://127.0.0.1:$STATUS_PORT/" | awk 'NR == 3 {print $1}'; }
urls() { # COUNT FILE: COUNT requests for small.json, round robin over the HOSTS origin hosts
    local i hosts=()
    for ((i = 0; i < HOSTS; i++)); do hosts+=("$(bench_origin_host "$i")"); done
    for ((i = 0; i < $1; i++)); do
        printf 'url = "%s"\noutput = "/dev/null"\n' "${URL/127.0.0.1/${hosts[i % HOSTS]}}"
    done > "$2"
}
urls "$WARM" "$TMP/warm.curl"; urls "$N" "$TMP/run.curl"
codes() { taskset -c 1 curl -s -x "http://127.0.0.1:$PORT" -K "$1" -w '%{http_code}\n' | sort | uniq -c; }
w=$(codes "$TMP/warm.curl")
[[ "$w" =~ ^\ *$WARM\ 200$ ]] || { echo "warm-up: not every answer was 200: $w" >&2; exit 1; }
# Each curl is one client connection, and the listener hands connections to the event loops in turn; every loop
# keeps its own upstream pool. With --hosts, workers − 1 connections of one /healthz request each come between
# the warm-up and the counted requests, so that these land on the loop whose pool the warm-up filled.
LOOPS=1
if ((HOSTS > 1)); then LOOPS=$(sed -n 's/.*authproxy started.* workers=\([0-9]*\).*/\1/p' "$TMP/p/log" | head -n1); fi
for _ in $(seq 2 "${LOOPS:-1}"); do
    curl -s --noproxy '*' -o /dev/null --max-time 30 "http://127.0.0.1:$PORT/healthz"
done
if [[ "$ADMIN" == 1 ]]; then M0=$(metrics_requests_total "$TMP/p"); fi
if [[ "$CLUSTER" == 1 ]]; then redis-cli -p "$RPORT" config resetstat >/dev/null; fi
ACCEPTS0=$(origin_accepts)
callgrind_control -z "$VPID" >/dev/null
r=$(codes "$TMP/run.curl")
callgrind_control -d "$VPID" >/dev/null
if [[ "$CLUSTER" == 1 ]]; then
    echo "Redis commands during the counted requests (INFO commandstats):"
    redis-cli -p "$RPORT" info commandstats | grep '^cmdstat' | grep -v 'cmdstat_info:\|cmdstat_config' || echo "  none"
fi
[[ "$r" =~ ^\ *$N\ 200$ ]] || { echo "run: not every answer was 200: $r" >&2; exit 1; }
if [[ "$ADMIN" == 1 ]]; then
    M1=$(metrics_requests_total "$TMP/p")
    echo "admin listener on 127.0.0.1:$(cat "$TMP/p/admin_port"): authproxy_requests_total $M0 -> $M1 (+$((M1 - M0)) over the $N requests)"
    [[ $((M1 - M0)) -eq "$N" ]] || { echo "metrics: authproxy_requests_total grew by $((M1 - M0)), not $N" >&2; exit 1; }
fi
for _ in $(seq 1 50); do ls "$TMP"/cg."$VPID".out.* >/dev/null 2>&1 && break; sleep 0.2; done
IR=$(awk '/^summary:/ {print $2}' "$TMP"/cg."$VPID".out.* | tail -n1)
[[ -n "$IR" ]] || { echo "no callgrind dump" >&2; exit 1; }
echo "binary: $BIN"
echo "admin listener (metrics): $([[ "$ADMIN" == 1 ]] && echo on || echo off); credentials: $CREDS; [cluster]: $([[ "$CLUSTER" == 1 ]] && echo on || echo off); upstream hosts: $HOSTS"
if ((HOSTS > 1)); then
    # A pool that keeps every destination holds one connection per host; one that drops some reconnects (and
    # closes others) during the run.
    echo "upstream connections open after the run: $(ss -Htn state established "( dport = :$ORIGIN_PORT )" | wc -l)" \
        "(accepted by the origin during the counted requests: $(( $(origin_accepts) - ACCEPTS0 )))"
fi
echo "requests: $N on one keep-alive connection (after $WARM warm-up$( ((${LOOPS:-1} > 1)) && echo " on the same event loop, $LOOPS loops")); Ir total: $IR"
python3 -c "print(f'Ir per request: {$IR / $N:,.0f}')"
if [[ "$PROFILE" -gt 0 ]]; then
    echo "-- top $PROFILE functions, Ir per request (self)"
    callgrind_annotate --inclusive=no --threshold=100 "$(ls "$TMP"/cg."$VPID".out.* | tail -n1)" > "$TMP/annotate.txt" 2>&1 || true
    cp "$TMP/annotate.txt" /tmp/irperrequest-annotate.txt
    cp "$(ls "$TMP"/cg."$VPID".out.* | tail -n1)" /tmp/irperrequest-callgrind.out
    grep -E '^ *[0-9,]+ ' "$TMP/annotate.txt" | grep -v 'PROGRAM TOTALS' | head -n "$PROFILE" \
        | python3 -c '
import sys, re
n = int(sys.argv[1])
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.*)$", line)
    if m:
        print("%9.0f  %s" % (int(m.group(1).replace(",", "")) / n, m.group(2)[:140]))
' "$N"
fi
