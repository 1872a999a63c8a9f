#!/usr/bin/env bash
# What OpenTelemetry tracing costs on the relay (issue 40): one authproxy binary with tracing off, the same binary
# with tracing on at 100 % sampling exporting to a local OTLP/HTTP receiver, and HAProxy (`nbthread 1`), in one run.
#
#   bash bench/tracing.sh BINARY [--rounds N] [--duration SECONDS] [--before OLD_BINARY]
#
# Every server is pinned to core 0; wrk, the nginx origin and the receiver (Tests/e2e/otlp_receiver.py, which
# decodes every export with the official protobuf definitions and counts the spans) to core 1. Each round runs wrk
# c50 then c1 through each target in turn, the order rotating per round; cells are medians over the rounds, with
# CPU µs/request (utime+stime of the target over the run ÷ requests wrk completed) and its ratio to HAProxy's of
# the same round. --before adds a build without tracing (e.g. the one before issue 40) with its api-key, to show
# that tracing off changed nothing. Tracing on is configured the way users do it, by the standard variables:
# OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER=always_on. At the end the spans the receiver got are printed
# with the requests made through the traced instance. Listens on 127.0.0.1 only.
set -euo pipefail
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN=""; ROUNDS=3; DURATION=5; BEFORE=""
if [[ $# -gt 0 && "$1" != -* ]]; then BIN="$(readlink -f "$1")"; shift; fi
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --before) BEFORE="$(readlink -f "$2")"; shift 2 ;;
        -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -n "$BIN" && -x "$BIN" ]] || { echo "usage: bash bench/tracing.sh BINARY [--rounds N] [--duration S] [--before OLD]" >&2; exit 2; }

BENCH_TAG="tracing"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"
# shellcheck source=bench/pinned.sh
source "$BENCH_DIR/pinned.sh"
require_tools wrk nginx haproxy taskset python3
python3 -c 'import opentelemetry.proto' 2>/dev/null || python3 -m pip install -q opentelemetry-proto
CLK_TCK=$(getconf CLK_TCK)
start_small_origin
write_proxy_lua ""
printf 'wrk.path = "/small.json?f=json"\n' > "$TMP/direct.lua"

# The receiver: on core 1, its port written to a file once it listens.
cat > "$TMP/receiver.py" <<PY
import sys, time
sys.path.insert(0, "$BENCH_DIR/../Tests/e2e")
from otlp_receiver import OTLPReceiver
r = OTLPReceiver().start()
open("$TMP/receiver.port", "w").write(r.endpoint)
while True:
    time.sleep(0.5)
    open("$TMP/receiver.count.tmp", "w").write("%d %d\n" % (len(r.spans()), len(r.errors)))
    import os; os.replace("$TMP/receiver.count.tmp", "$TMP/receiver.count")
PY
taskset -c 1 python3 "$TMP/receiver.py" > "$TMP/receiver.log" 2>&1 & PIDS+=("$!")
for _ in $(seq 1 100); do [[ -s "$TMP/receiver.port" ]] && break; sleep 0.1; done
[[ -s "$TMP/receiver.port" ]] || { cat "$TMP/receiver.log" >&2; die "the OTLP receiver did not start"; }
ENDPOINT=$(cat "$TMP/receiver.port")

P_OFF=$(free_port); P_ON=$(free_port); P_HAP=$(free_port)
OFF_PID=$(start_bench_proxy "$BIN" "$P_OFF"); PIDS+=("$OFF_PID")
ON_PID=$(OTEL_EXPORTER_OTLP_ENDPOINT="$ENDPOINT" OTEL_TRACES_SAMPLER=always_on start_bench_proxy "$BIN" "$P_ON")
PIDS+=("$ON_PID")
write_haproxy_relay_cfg "$TMP/haproxy.cfg" "127.0.0.1:$P_HAP" "127.0.0.1:$ORIGIN_PORT" "$TMP/haproxy.pid"
taskset -c 0 haproxy -db -f "$TMP/haproxy.cfg" > "$TMP/haproxy.log" 2>&1 & HAP_PID=$!; PIDS+=("$HAP_PID")
for _ in $(seq 1 100); do curl -sf --noproxy '*' -o /dev/null "http://127.0.0.1:$P_HAP/small.json" && break; sleep 0.1; done

TARGETS=("tracing off|$OFF_PID|-s $TMP/proxy.lua http://127.0.0.1:$P_OFF"
         "tracing on, 100 %|$ON_PID|-s $TMP/proxy.lua http://127.0.0.1:$P_ON"
         "HAProxy (nbthread 1)|$HAP_PID|-s $TMP/direct.lua http://127.0.0.1:$P_HAP")
if [[ -n "$BEFORE" ]]; then
    P_BEFORE=$(free_port)
    BEFORE_PID=$(start_bench_proxy "$BEFORE" "$P_BEFORE"); PIDS+=("$BEFORE_PID")
    TARGETS+=("before (no tracing code)|$BEFORE_PID|-s $TMP/proxy.lua http://127.0.0.1:$P_BEFORE")
fi

ROWS="$TMP/rows.tsv"; : > "$ROWS"; ON_REQS=0
for r in $(seq 1 "$ROUNDS"); do
    n=${#TARGETS[@]}
    for i in $(seq 0 $((n - 1))); do
        entry=${TARGETS[$(((i + r - 1) % n))]}
        IFS='|' read -r name pid args <<<"$entry"
        for c in 50 1; do
            before=$(cpu_ticks "$pid")
            # shellcheck disable=SC2086
            out=$(taskset -c 1 wrk --latency -t1 -c"$c" -d"${DURATION}s" $args 2>&1)
            after=$(cpu_ticks "$pid")
            reqs=$(awk '/requests in/ {print $1}' <<<"$out")
            rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
            p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
            if grep -qE "Socket errors|Non-2xx" <<<"$out"; then log "$name c$c: $(grep -E 'Socket errors|Non-2xx' <<<"$out" | tr '\n' ' ')"; fi
            cpu=$(cpu_us_per_request "$before" "$after" "$reqs")
            [[ "$name" == "tracing on, 100 %" ]] && ON_REQS=$((ON_REQS + reqs))
            printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$r" "$c" "$rps" "$cpu" "$p50" >> "$ROWS"
            log "round $r $name c$c: $rps req/s, CPU $cpu µs/req, p50 $p50"
        done
    done
done
sleep 6  # the exporter's batch interval: the last spans reach the receiver
read -r SPANS ERRORS < "$TMP/receiver.count"
echo "binary: $BIN${BEFORE:+; before: $BEFORE}; $ROUNDS rounds of wrk ${DURATION}s (c50, then c1)"
echo "receiver: $SPANS spans for $ON_REQS requests through the traced instance (plus its start-up check), $ERRORS undecodable exports"
python3 - "$ROWS" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
def us(s):
    for suf, m in (("us", 1), ("ms", 1e3), ("s", 1e6)):
        if s.endswith(suf): return float(s[:-len(suf)]) * m
    return float(s)
cell = {}
for name, r, c, rps, cpu, p50 in rows:
    cell[(name, r, c)] = (float(rps), float(cpu), us(p50))
names = list(dict.fromkeys(r[0] for r in rows))
rounds = sorted(set(r[1] for r in rows))
base = "HAProxy (nbthread 1)"
print()
print("| target | req/s c50 | CPU µs/req c50 | ÷ HAProxy | CPU µs/req c1 | ÷ HAProxy | p50 c1 |")
print("|---|---:|---:|---:|---:|---:|---:|")
for n in names:
    def med(c, k): return statistics.median(cell[(n, r, c)][k] for r in rounds)
    def ratio(c): return statistics.median(cell[(n, r, c)][1] / cell[(base, r, c)][1] for r in rounds)
    print("| %s | %.0f | %.1f | %.2f | %.1f | %.2f | %.0f µs |" % (
        n, med("50", 0), med("50", 1), ratio("50"), med("1", 1), ratio("1"), med("1", 2)))
PY
