#!/usr/bin/env bash
# Where authproxy's CPU goes: relays a 2 KB JSON from a local nginx through one authproxy binary with an
# api-key credential (the issue-10 case), under wrk c50, and records a perf cpu-clock profile of the proxy.
#
#   bash bench/profile.sh [BINARY] [--duration SECONDS] [--connections C] [--out DIR] [--download-mb N]
#
# The proxy is pinned to core 0, nginx and wrk to core 1. Prints CPU µs per request, then the profile by
# shared object and by symbol (self time, top 45), and syscalls and context switches per request. Writes
# perf.data and the reports to DIR (default: a temp dir, removed on exit). Listens on 127.0.0.1 only.
# --download-mb N profiles three curl downloads of an N MiB file through the proxy instead (CPU s per GiB,
# then the same profile tables), for the streaming path.
set -euo pipefail

BIN="$(pwd)/.build/release/authproxy"; DURATION=10; CONNS=50; OUT=""; DOWNLOAD_MB=0
if [[ $# -gt 0 && "$1" != --* ]]; then BIN="$(readlink -f "$1")"; shift; fi
while [[ $# -gt 0 ]]; do
    case "$1" in
        --duration) DURATION="$2"; shift 2 ;;
        --connections) CONNS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --download-mb) DOWNLOAD_MB="$2"; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -x "$BIN" ]] || { echo "no binary at $BIN (swift build -c release)" >&2; exit 2; }
source "$(dirname "${BASH_SOURCE[0]}")/pinned.sh"
require_tools wrk nginx taskset perf python3
[[ -n "$OUT" ]] || OUT="$TMP/out"
mkdir -p "$OUT"
start_small_origin
PORT=$(free_port)
PID=$(start_bench_proxy "$BIN" "$PORT"); PIDS+=("$PID")
if [[ $DOWNLOAD_MB -gt 0 ]]; then
    head -c $((DOWNLOAD_MB * 1024 * 1024)) /dev/urandom > "$TMP/www/big.bin"; chmod a+r "$TMP/www/big.bin"
    BIG="http://127.0.0.1:$ORIGIN_PORT/big.bin"
    dl() { taskset -c 1 curl -s -o /dev/null -w '%{speed_download}\n' --noproxy '' -x "http://127.0.0.1:$PORT" "$BIG"; }
    dl >/dev/null   # warm-up
    TICK=$(getconf CLK_TCK)
    t0=$(awk '{print $14+$15}' "/proc/$PID/stat")
    perf record -q -e cpu-clock -g -p "$PID" -o "$OUT/perf.data" >/dev/null 2>&1 &
    PERF=$!
    sleep 0.5
    speeds=$(for _ in 1 2 3; do dl; done)
    kill -INT "$PERF"; wait "$PERF" || true
    t1=$(awk '{print $14+$15}' "/proc/$PID/stat")
    python3 -c "import sys; s=[float(x)/1e6 for x in sys.argv[5:]]; print('3 downloads of %s MiB: %s MB/s; %.2f CPU s/GiB' % (sys.argv[1], ', '.join('%.0f' % x for x in s), (int(sys.argv[3])-int(sys.argv[2]))/int(sys.argv[4])/(3*int(sys.argv[1])/1024)))" \
        "$DOWNLOAD_MB" "$t0" "$t1" "$TICK" $speeds
    perf report -i "$OUT/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -15 | tee "$OUT/by-dso.txt"
    echo
    perf report -i "$OUT/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -45 | tee "$OUT/by-symbol.txt"
    exit 0
fi
write_proxy_lua
# Warm-up, then the measured run under perf.
taskset -c 1 wrk -t1 -c"$CONNS" -d2s -s "$TMP/proxy.lua" "http://127.0.0.1:$PORT" >/dev/null
TICK=$(getconf CLK_TCK)
t0=$(awk '{print $14+$15}' "/proc/$PID/stat")
perf record -q -e cpu-clock -g -p "$PID" -o "$OUT/perf.data" -- sleep "$DURATION" >/dev/null 2>&1 &
PERF=$!
out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$TMP/proxy.lua" "http://127.0.0.1:$PORT" 2>&1)
wait "$PERF" || true
t1=$(awk '{print $14+$15}' "/proc/$PID/stat")
reqs=$(awk '/requests in/ {print $1}' <<<"$out")
python3 -c "import sys; r=int(sys.argv[1]); print('requests %d, %.0f req/s, %.1f CPU us/request' % (r, r/float(sys.argv[4]), (int(sys.argv[3])-int(sys.argv[2]))*1e6/int(sys.argv[5])/max(1,r)))" \
    "$reqs" "$t0" "$t1" "$DURATION" "$TICK"
perf report -i "$OUT/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -15 | tee "$OUT/by-dso.txt"
echo
perf report -i "$OUT/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -45 | tee "$OUT/by-symbol.txt"
echo
# Syscalls and context switches per request, over a shorter run.
out2=$( (perf stat -e 'raw_syscalls:sys_enter,context-switches' -p "$PID" -x, -o "$OUT/stat.txt" -- sleep 5 &) ; \
    taskset -c 1 wrk -t1 -c"$CONNS" -d5s -s "$TMP/proxy.lua" "http://127.0.0.1:$PORT" 2>&1)
sleep 0.5
reqs2=$(awk '/requests in/ {print $1}' <<<"$out2")
awk -F, -v r="$reqs2" '/raw_syscalls|context-switches/ {printf "%s per request: %.1f\n", $3, $1 / r}' "$OUT/stat.txt"
