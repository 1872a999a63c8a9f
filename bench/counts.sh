#!/usr/bin/env bash
# The machine-independent figures of issue 39, for authproxy and its peers measured the same way, in one run:
# syscalls, context switches and instructions per request at c1 and c50, next to CPU µs per request.
#
#   bash bench/counts.sh BINARY [--duration SECONDS] [--no-ir] [--requests N]
#
# Targets, each pinned to core 0 with one thread of execution where it has a choice (wrk and the nginx origin on
# core 1): authproxy with the bench api-key credential (a token injected into every request, absolute-form
# requests), the Dispatch floor (bench/floor: the least a keep-alive relay on Dispatch read sources does, so the
# part of authproxy's counts that libdispatch itself sets), HAProxy (`nbthread 1`) and nginx (`worker_processes 1`)
# as reverse relays of the same origin.
# For each target and each of c1 and c50: a 2 s warm-up, then one wrk run of --duration seconds (default 5) under
# `perf stat -e 'syscalls:sys_enter_*',context-switches` of every process of the target; per request = the count ÷
# the requests wrk completed. CPU µs/request is the target's utime+stime over the same run (it includes perf's
# tracepoint cost, the same for each target; bench/run.sh gives it without perf). Instructions per request
# (callgrind Ir, user space only, on one keep-alive connection: --requests, default 2000, after 200 warm-up
# requests): authproxy through bench/irperrequest.sh, the peers the same way under valgrind; --no-ir skips them
# (valgrind takes a few minutes).
#
# Counts, unlike times, hardly move with other load on the machine: they are the headline of docs/BENCHMARKS.md.
# Needs wrk, nginx, haproxy, perf (linux-perf) with tracefs, valgrind; listens on 127.0.0.1 only.
set -euo pipefail
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN=""; DURATION=5; IRS=1; N=2000
FLOOR_BIN="$BENCH_DIR/floor/.build/release/floor"
if [[ $# -gt 0 && "$1" != -* ]]; then BIN="$(readlink -f "$1")"; shift; fi
while [[ $# -gt 0 ]]; do
    case "$1" in
        --duration) DURATION="$2"; shift 2 ;;
        --no-ir) IRS=0; shift ;;
        --requests) N="$2"; shift 2 ;;
        -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -n "$BIN" && -x "$BIN" ]] || { echo "usage: bash bench/counts.sh BINARY [--duration S] [--no-ir] [--requests N]" >&2; exit 2; }

BENCH_TAG="counts"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"
# shellcheck source=bench/pinned.sh
source "$BENCH_DIR/pinned.sh"
require_tools wrk nginx haproxy taskset python3 perf
if [[ ! -x "$FLOOR_BIN" ]]; then
    log "building the Dispatch floor (swift build -c release --package-path bench/floor)"
    swift build -c release --package-path "$BENCH_DIR/floor" >&2
fi
[[ $IRS -eq 0 ]] || require_tools valgrind callgrind_control
CLK_TCK=$(getconf CLK_TCK)
start_small_origin
ORIGIN="127.0.0.1:$ORIGIN_PORT"
PATH_Q="/small.json?f=json"
write_proxy_lua ""
printf 'wrk.path = "%s"\n' "$PATH_Q" > "$TMP/direct.lua"

P_AUTH=$(free_port); P_HAP=$(free_port); P_NGX=$(free_port); P_FLOOR=$(free_port)
AUTH_PID=$(start_bench_proxy "$BIN" "$P_AUTH"); PIDS+=("$AUTH_PID")
taskset -c 0 "$FLOOR_BIN" "$P_FLOOR" "$ORIGIN_PORT" > "$TMP/floor.log" 2>&1 & FLOOR_PID=$!; PIDS+=("$FLOOR_PID")
write_haproxy_relay_cfg "$TMP/haproxy.cfg" "127.0.0.1:$P_HAP" "$ORIGIN" "$TMP/haproxy.pid"
taskset -c 0 haproxy -db -f "$TMP/haproxy.cfg" > "$TMP/haproxy.log" 2>&1 & HAP_PID=$!; PIDS+=("$HAP_PID")
write_nginx_relay_conf "$TMP/relay" "127.0.0.1:$P_NGX" "$ORIGIN"
taskset -c 0 nginx -p "$TMP/relay" -e "$TMP/relay/error.log" -c "$TMP/relay/nginx.conf" & NGX_PID=$!; PIDS+=("$NGX_PID")
for p in "$P_HAP" "$P_NGX" "$P_FLOOR"; do
    for _ in $(seq 1 100); do curl -sf --noproxy '*' -o /dev/null "http://127.0.0.1:$p$PATH_Q" && break; sleep 0.1; done
done

# target | pid | wrk args
TARGETS=(
    "authproxy + api-key|$AUTH_PID|-s $TMP/proxy.lua http://127.0.0.1:$P_AUTH"
    "Dispatch floor|$FLOOR_PID|-s $TMP/direct.lua http://127.0.0.1:$P_FLOOR"
    "HAProxy (nbthread 1)|$HAP_PID|-s $TMP/direct.lua http://127.0.0.1:$P_HAP"
    "nginx relay (1 worker)|$NGX_PID|-s $TMP/direct.lua http://127.0.0.1:$P_NGX"
)
ROWS="$TMP/rows.tsv"; : > "$ROWS"
for conns in 1 50; do
    for entry in "${TARGETS[@]}"; do
        IFS='|' read -r name pid args <<<"$entry"
        # shellcheck disable=SC2086
        taskset -c 1 wrk -t1 -c"$conns" -d2s $args > /dev/null
        pids=$(tree_pids "$pid" | paste -sd, -)
        perf stat -x, -e 'syscalls:sys_enter_*' -e context-switches -p "$pids" -o "$TMP/perf.csv" &
        perf_pid=$!
        sleep 0.3
        before=$(cpu_ticks "$pid")
        # shellcheck disable=SC2086
        out=$(taskset -c 1 wrk --latency -t1 -c"$conns" -d"${DURATION}s" $args 2>&1)
        after=$(cpu_ticks "$pid")
        kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
        reqs=$(awk '/requests in/ {print $1}' <<<"$out")
        p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
        if grep -qE "Socket errors|Non-2xx" <<<"$out"; then log "$name c$conns: $(grep -E 'Socket errors|Non-2xx' <<<"$out")"; fi
        counts=$(python3 - "$TMP/perf.csv" "$reqs" <<'PY'
import sys
sc = cs = 0.0
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) < 3 or not f[0].replace(".", "").isdigit():
        continue
    if f[2] == "context-switches":
        cs += float(f[0])
    else:
        sc += float(f[0])
n = int(sys.argv[2])
print("%.2f\t%.2f" % (sc / n, cs / n))
PY
)
        cpu=$(cpu_us_per_request "$before" "$after" "$reqs")
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$conns" "$reqs" "$counts" "$cpu" "$p50" >> "$ROWS"
        log "$name c$conns: $reqs requests, syscalls/cs per request $(tr '\t' ' ' <<<"$counts"), CPU ${cpu} µs/req, p50 $p50"
    done
done

# Instructions per request: one keep-alive connection of curl (core 1), the target under callgrind (core 0).
IR_TSV="$TMP/ir.tsv"; : > "$IR_TSV"
peer_ir() { # name url cmd...
    local name="$1" url="$2"; shift 2
    local out="$TMP/cg-$RANDOM"
    mkdir -p "$out"
    taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p.out" "$@" > "$out/log" 2>&1 &
    local vpid=$!; PIDS+=("$vpid")
    for _ in $(seq 1 300); do curl -sf --noproxy '*' -o /dev/null --max-time 2 "$url" && break; sleep 0.2; done
    for _ in $(seq 1 200); do printf 'url = "%s"\noutput = "/dev/null"\n' "$url"; done > "$out/warm.curl"
    for _ in $(seq 1 "$N"); do printf 'url = "%s"\noutput = "/dev/null"\n' "$url"; done > "$out/run.curl"
    taskset -c 1 curl -s --noproxy '*' -K "$out/warm.curl" > /dev/null
    # nginx runs its worker as a child: zero and dump every process valgrind runs.
    callgrind_control -z > /dev/null
    local codes
    codes=$(taskset -c 1 curl -s --noproxy '*' -K "$out/run.curl" -w '%{http_code}\n' | sort | uniq -c)
    callgrind_control -d > /dev/null
    [[ "$codes" =~ ^\ *$N\ 200$ ]] || { log "$name under valgrind: not every answer was 200: $codes"; return 0; }
    sleep 1
    local ir
    ir=$(cat "$out"/cg.*.out.* 2>/dev/null | awk '/^summary:/ {s += $2} END {print s + 0}')
    printf '%s\t%s\n' "$name" "$(python3 -c "print(round($ir / $N))")" >> "$IR_TSV"
    kill "$vpid" 2>/dev/null || true
    wait "$vpid" 2>/dev/null || true
}
if [[ $IRS -eq 1 ]]; then
    kill "$HAP_PID" "$NGX_PID" "$AUTH_PID" "$FLOOR_PID" 2>/dev/null || true
    log "instructions per request: authproxy (bench/irperrequest.sh)"
    ir=$(bash "$BENCH_DIR/irperrequest.sh" "$BIN" --requests "$N" | awk '/^Ir per request:/ {gsub(",", "", $4); print $4}')
    printf '%s\t%s\n' "authproxy + api-key" "$ir" >> "$IR_TSV"
    log "instructions per request: HAProxy"
    P2=$(free_port)
    write_haproxy_relay_cfg "$TMP/haproxy-vg.cfg" "127.0.0.1:$P2" "$ORIGIN" "$TMP/haproxy-vg.pid"
    peer_ir "HAProxy (nbthread 1)" "http://127.0.0.1:$P2$PATH_Q" haproxy -db -f "$TMP/haproxy-vg.cfg"
    log "instructions per request: nginx"
    P3=$(free_port)
    write_nginx_relay_conf "$TMP/relay-vg" "127.0.0.1:$P3" "$ORIGIN"
    # One process (no master): valgrind follows it without --trace-children.
    sed -i 's/^worker_processes 1;/worker_processes 1;\nmaster_process off;/' "$TMP/relay-vg/nginx.conf"
    peer_ir "nginx relay (1 worker)" "http://127.0.0.1:$P3$PATH_Q" \
        nginx -p "$TMP/relay-vg" -e "$TMP/relay-vg/error.log" -c "$TMP/relay-vg/nginx.conf"
fi

python3 - "$ROWS" "$IR_TSV" "$BIN" "$DURATION" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
irs = dict(l.rstrip("\n").split("\t") for l in open(sys.argv[2]) if l.strip())
by = {}
for name, c, reqs, sc, cs, cpu, p50 in rows:
    by.setdefault(name, {})[c] = (float(sc), float(cs), float(cpu), p50)
names = list(by)
base = "HAProxy (nbthread 1)"
print(f"binary: {sys.argv[3]}; wrk {sys.argv[4]} s per run; per request:")
print()
print("| target | syscalls c1 | cs c1 | syscalls c50 | cs c50 | Ir | CPU µs c1 | CPU µs c50 | p50 c1 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for n in names:
    c1, c50 = by[n]["1"], by[n]["50"]
    ir = irs.get(n)
    irs_cell = f"{int(ir):,}" if ir else "n/a"
    print(f"| {n} | {c1[0]:.2f} | {c1[1]:.2f} | {c50[0]:.2f} | {c50[1]:.2f} | {irs_cell} | {c1[2]:.1f} | {c50[2]:.1f} | {c1[3]} |")
if base in by:
    print()
    print("÷ HAProxy:")
    print()
    print("| target | syscalls c1 | cs c1 | syscalls c50 | cs c50 | Ir | CPU µs c1 | CPU µs c50 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    b1, b50 = by[base]["1"], by[base]["50"]
    def r(a, b): return f"{a / b:.2f}" if b else "n/a"
    for n in names:
        c1, c50 = by[n]["1"], by[n]["50"]
        ir, bir = irs.get(n), irs.get(base)
        print(f"| {n} | {r(c1[0], b1[0])} | {r(c1[1], b1[1])} | {r(c50[0], b50[0])} | {r(c50[1], b50[1])} | "
              f"{r(int(ir), int(bir)) if ir and bir else 'n/a'} | {r(c1[2], b1[2])} | {r(c50[2], b50[2])} |")
PY
