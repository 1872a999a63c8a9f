#!/usr/bin/env bash
# Benchmark harness: authproxy vs. nginx / HAProxy / Squid / the Dispatch floor on loopback.
#
#   bash bench/run.sh [--authproxy PATH] [--floor PATH] [--duration SECONDS] [--warmup SECONDS]
#                     [--rounds N] [--download-mb N] [--downloads-only] [--skip-authproxy] [--out FILE]
#
# The proxy under test and every peer run on core 0 (taskset -c 0), wrk and the origin on core 1.
# Everything listens on 127.0.0.1 only and is torn down on exit.
# See bench/README.md for what is measured and how to read the output.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$BENCH_DIR/.." && pwd)"

AUTHPROXY_BIN=""
FLOOR_BIN=""
DURATION=10
ROUNDS=3
WARMUP=2
SKIP_AUTHPROXY=0
DOWNLOADS_ONLY=0
OUT_FILE="$BENCH_DIR/results-latest.md"
DOWNLOAD_MB=100   # size of big.bin in MiB (--download-mb); 1024 checks issue 10's 1 GiB streaming target
DL_REPEATS=3

usage() {
    sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --authproxy) AUTHPROXY_BIN="$2"; shift 2 ;;
        --authproxy=*) AUTHPROXY_BIN="${1#*=}"; shift ;;
        --duration) DURATION="$2"; shift 2 ;;
        --duration=*) DURATION="${1#*=}"; shift ;;
        --floor) FLOOR_BIN="$2"; shift 2 ;;
        --floor=*) FLOOR_BIN="${1#*=}"; shift ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --rounds=*) ROUNDS="${1#*=}"; shift ;;
        --download-mb) DOWNLOAD_MB="$2"; shift 2 ;;
        --download-mb=*) DOWNLOAD_MB="${1#*=}"; shift ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --warmup=*) WARMUP="${1#*=}"; shift ;;
        --skip-authproxy) SKIP_AUTHPROXY=1; shift ;;
        --downloads-only) DOWNLOADS_ONLY=1; shift ;;
        --out) OUT_FILE="$2"; shift 2 ;;
        --out=*) OUT_FILE="${1#*=}"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

[[ "$DURATION" =~ ^[0-9]+$ && "$DURATION" -ge 1 ]] || { echo "--duration must be a positive integer" >&2; exit 2; }
[[ "$WARMUP" =~ ^[0-9]+$ ]] || { echo "--warmup must be a non-negative integer" >&2; exit 2; }
[[ "$ROUNDS" =~ ^[0-9]+$ && "$ROUNDS" -ge 1 ]] || { echo "--rounds must be a positive integer" >&2; exit 2; }
[[ "$DOWNLOAD_MB" =~ ^[0-9]+$ && "$DOWNLOAD_MB" -ge 1 ]] || { echo "--download-mb must be a positive integer" >&2; exit 2; }
BIG_BYTES=$((DOWNLOAD_MB * 1024 * 1024))
# curl's limit per download: 120 s, plus 1 s per 10 MiB above 100 MiB (a slow peer still finishes).
DL_MAX_TIME=$((120 + (DOWNLOAD_MB > 100 ? (DOWNLOAD_MB - 100) / 10 : 0)))

BENCH_TAG="bench"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"

# --------------------------------------------------------------------------
# 1. Packages
# --------------------------------------------------------------------------
need_pkgs=()
command -v nginx   >/dev/null 2>&1 || [[ -x /usr/sbin/nginx   ]] || need_pkgs+=(nginx-light)
command -v haproxy >/dev/null 2>&1 || [[ -x /usr/sbin/haproxy ]] || need_pkgs+=(haproxy)
command -v squid   >/dev/null 2>&1 || [[ -x /usr/sbin/squid   ]] || need_pkgs+=(squid)
command -v wrk     >/dev/null 2>&1 || need_pkgs+=(wrk)
command -v curl    >/dev/null 2>&1 || need_pkgs+=(curl)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
command -v taskset >/dev/null 2>&1 || need_pkgs+=(util-linux)
install_missing "${need_pkgs[@]}"
export PATH="$PATH:/usr/sbin:/sbin"

# --------------------------------------------------------------------------
# authproxy binary
# --------------------------------------------------------------------------
if [[ $SKIP_AUTHPROXY -eq 0 ]]; then
    resolve_authproxy
fi

# The Dispatch floor (bench/floor), built if missing.
if [[ -z "$FLOOR_BIN" ]]; then
    FLOOR_BIN="$BENCH_DIR/floor/.build/release/floor"
    if [[ ! -x "$FLOOR_BIN" ]]; then
        log "building the Dispatch floor (swift build -c release --package-path bench/floor)"
        swift build -c release --package-path "$BENCH_DIR/floor" >&2
    fi
fi
[[ -x "$FLOOR_BIN" ]] || die "floor binary not found or not executable: $FLOOR_BIN"

# Core pinning: the server under test (authproxy or a peer) gets core 0 to itself; the load
# generator and the origin share core 1. Every server is measured on the same single core.
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (server on core 0, wrk + origin on core 1); nproc=$(nproc)"

# --------------------------------------------------------------------------
# 2. Temp dir, ports, cleanup
# --------------------------------------------------------------------------
TMP="$(mktemp -d /tmp/authproxy-bench.XXXXXX)"
chmod 755 "$TMP"
LOG_GLOBS=('*.log' 'squid/*.log')
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

read -r P_ORIGIN P_HAPROXY P_NGINX P_SQUID P_AUTH P_AUTH_PLAIN P_FLOOR P_AUTH_CURL < <(free_ports 8)
ORIGIN="127.0.0.1:$P_ORIGIN"
TOKEN="BENCHKEY"
log "tmp=$TMP ports: origin=$P_ORIGIN haproxy=$P_HAPROXY nginx-relay=$P_NGINX squid=$P_SQUID authproxy=$P_AUTH authproxy-plain=$P_AUTH_PLAIN authproxy-libcurl=$P_AUTH_CURL floor=$P_FLOOR"

# Content
mkdir -p "$TMP/www"
cp "$BENCH_DIR/small.json" "$TMP/www/small.json"
head -c "$BIG_BYTES" /dev/urandom > "$TMP/www/big.bin"
SMALL_BYTES=$(stat -c %s "$TMP/www/small.json")
chmod -R a+rX "$TMP/www"

NGINX_USER_LINE=""
[[ $EUID -eq 0 ]] && NGINX_USER_LINE="user root;"

# ---- nginx origin ----------------------------------------------------------
mkdir -p "$TMP/nginx-origin"
cat > "$TMP/nginx-origin/nginx.conf" <<EOF
$NGINX_USER_LINE
worker_processes 1;
daemon off;
pid $TMP/nginx-origin/nginx.pid;
error_log $TMP/nginx-origin.log warn;
events { worker_connections 4096; }
http {
    types { application/json json; application/octet-stream bin; }
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 100000;
    keepalive_timeout 65s;
    client_body_temp_path $TMP/nginx-origin/body;
    proxy_temp_path $TMP/nginx-origin/proxy;
    fastcgi_temp_path $TMP/nginx-origin/fastcgi;
    uwsgi_temp_path $TMP/nginx-origin/uwsgi;
    scgi_temp_path $TMP/nginx-origin/scgi;
    server {
        listen 127.0.0.1:$P_ORIGIN;
        root $TMP/www;
        # Answers with the query string it received: checks authproxy's token injection.
        location = /echo {
            default_type text/plain;
            return 200 "args=\$args\n";
        }
    }
}
EOF

# ---- nginx and HAProxy reverse relays (bench/lib.sh) ---------------------
write_nginx_relay_conf "$TMP/nginx-relay" "127.0.0.1:$P_NGINX" "$ORIGIN" "$NGINX_USER_LINE"
write_haproxy_relay_cfg "$TMP/haproxy.cfg" "127.0.0.1:$P_HAPROXY" "$ORIGIN" "$TMP/haproxy.pid"

# ---- Squid forward proxy ---------------------------------------------------
mkdir -p "$TMP/squid"
SQUID_USER_LINE=""
if [[ $EUID -eq 0 ]]; then
    if id proxy >/dev/null 2>&1; then
        SQUID_USER_LINE="cache_effective_user proxy"
        chown -R proxy: "$TMP/squid"
    else
        SQUID_USER_LINE="cache_effective_user nobody"
        chown -R nobody "$TMP/squid"
    fi
fi
cat > "$TMP/squid/squid.conf" <<EOF
http_port 127.0.0.1:$P_SQUID
$SQUID_USER_LINE
acl bench_clients src 127.0.0.1/32
http_access allow bench_clients
http_access deny all
cache deny all
cache_mem 8 MB
pid_filename $TMP/squid/squid.pid
cache_log $TMP/squid/cache.log
access_log none
cache_store_log none
logfile_rotate 0
coredump_dir $TMP/squid
netdb_filename none
pinger_enable off
icp_port 0
htcp_port 0
shutdown_lifetime 0 seconds
client_persistent_connections on
server_persistent_connections on
EOF

# ---- authproxy -------------------------------------------------------------
# Three instances: "authproxy" injects an api-key (token=BENCHKEY) into every request to the origin,
# the case issue 10 measures; "authproxy-plain" has no credential (plain relay); "authproxy-libcurl" is
# "authproxy" with `http_client = "libcurl"` (plain http:// through libcurl instead of the proxy's own
# HTTP/1.1 client). All use the default number of workers.
if [[ $SKIP_AUTHPROXY -eq 0 ]]; then
    mkdir -p "$TMP/state" "$TMP/state-plain" "$TMP/state-libcurl"
    # apikey_conf PORT STATE_DIR [EXTRA_PROXY_LINE] -> an authproxy config with the api-key credential on stdout
    apikey_conf() {
        printf '[proxy]\nlisten = ["127.0.0.1:%s"]\nstate_dir = "%s"\n%s\n' "$1" "$2" "${3:-}"
        printf '[log]\nlevel = "warning"\n[[credential]]\nname = "bench-key"\ntype = "api-key"\n'
        printf 'key = "%s"\nmatch = "http://%s"\n' "$TOKEN" "$ORIGIN"
    }
    apikey_conf "$P_AUTH" "$TMP/state" > "$TMP/authproxy.toml"
    apikey_conf "$P_AUTH_CURL" "$TMP/state-libcurl" 'http_client = "libcurl"' > "$TMP/authproxy-libcurl.toml"
    cat > "$TMP/authproxy-plain.toml" <<EOF
[proxy]
listen = ["127.0.0.1:$P_AUTH_PLAIN"]
state_dir = "$TMP/state-plain"
[log]
level = "warning"
EOF
    # Optional extra TOML (must start with its own [table] header), added to both.
    if [[ -n "${AUTHPROXY_EXTRA_CONFIG:-}" ]]; then
        printf '\n%s\n' "$AUTHPROXY_EXTRA_CONFIG" >> "$TMP/authproxy.toml"
        printf '\n%s\n' "$AUTHPROXY_EXTRA_CONFIG" >> "$TMP/authproxy-plain.toml"
        printf '\n%s\n' "$AUTHPROXY_EXTRA_CONFIG" >> "$TMP/authproxy-libcurl.toml"
    fi
fi

# --------------------------------------------------------------------------
# Start servers
# --------------------------------------------------------------------------
wait_http() { # name url [proxy]
    local name="$1" url="$2" proxy="${3:-}" code=""
    local args=(-s -o /dev/null -w '%{http_code}' --max-time 1)
    if [[ -n "$proxy" ]]; then args+=(--noproxy '' -x "http://$proxy"); else args+=(--noproxy '*'); fi
    for _ in $(seq 1 100); do
        kill -0 "${PID_OF[$name]}" 2>/dev/null || die "$name exited during startup"
        code=$(curl "${args[@]}" "$url" 2>/dev/null || true)
        [[ "$code" == "200" ]] && return 0
        sleep 0.1
    done
    die "$name not ready after 10s (last HTTP status: ${code:-none}) at $url"
}

log "starting nginx origin"
start_bg origin "$TMP/nginx-origin.stdout.log" "${PIN_LOAD[@]}" nginx -p "$TMP/nginx-origin" -e "$TMP/nginx-origin.log" -c "$TMP/nginx-origin/nginx.conf"
wait_http origin "http://$ORIGIN/small.json"

log "starting haproxy"
start_bg haproxy "$TMP/haproxy.log" "${PIN_SERVER[@]}" haproxy -db -f "$TMP/haproxy.cfg"
wait_http haproxy "http://127.0.0.1:$P_HAPROXY/small.json"

log "starting nginx relay"
start_bg nginx-relay "$TMP/nginx-relay.stdout.log" "${PIN_SERVER[@]}" nginx -p "$TMP/nginx-relay" -e "$TMP/nginx-relay.log" -c "$TMP/nginx-relay/nginx.conf"
wait_http nginx-relay "http://127.0.0.1:$P_NGINX/small.json"

log "starting squid"
start_bg squid "$TMP/squid.stdout.log" "${PIN_SERVER[@]}" squid -N -f "$TMP/squid/squid.conf"
wait_http squid "http://$ORIGIN/small.json" "127.0.0.1:$P_SQUID"

log "starting the Dispatch floor ($FLOOR_BIN)"
start_bg floor "$TMP/floor.log" "${PIN_SERVER[@]}" "$FLOOR_BIN" "$P_FLOOR" "$P_ORIGIN"
wait_http floor "http://127.0.0.1:$P_FLOOR/small.json"

if [[ $SKIP_AUTHPROXY -eq 0 ]]; then
    log "starting authproxy with an api-key credential ($AUTHPROXY_BIN)"
    start_bg authproxy "$TMP/authproxy.log" "${PIN_SERVER[@]}" "$AUTHPROXY_BIN" serve --config "$TMP/authproxy.toml"
    wait_http authproxy "http://127.0.0.1:$P_AUTH/healthz"
    log "starting authproxy-plain, no credential"
    start_bg authproxy-plain "$TMP/authproxy-plain.log" "${PIN_SERVER[@]}" "$AUTHPROXY_BIN" serve --config "$TMP/authproxy-plain.toml"
    wait_http authproxy-plain "http://127.0.0.1:$P_AUTH_PLAIN/healthz"
    log "starting authproxy-libcurl, api-key credential, http_client = libcurl"
    start_bg authproxy-libcurl "$TMP/authproxy-libcurl.log" "${PIN_SERVER[@]}" "$AUTHPROXY_BIN" serve --config "$TMP/authproxy-libcurl.toml"
    wait_http authproxy-libcurl "http://127.0.0.1:$P_AUTH_CURL/healthz"
fi

# --------------------------------------------------------------------------
# 3. Measurements
# --------------------------------------------------------------------------
# target name | kind (direct|forward) | listen addr
TARGETS=(
    "origin|direct|$ORIGIN"
    "authproxy|forward|127.0.0.1:$P_AUTH"
    "authproxy-plain|forward|127.0.0.1:$P_AUTH_PLAIN"
    "authproxy-libcurl|forward|127.0.0.1:$P_AUTH_CURL"
    "floor|direct|127.0.0.1:$P_FLOOR"
    "haproxy|direct|127.0.0.1:$P_HAPROXY"
    "nginx-relay|direct|127.0.0.1:$P_NGINX"
    "squid|forward|127.0.0.1:$P_SQUID"
)
is_authproxy() { [[ $1 == authproxy || $1 == authproxy-plain || $1 == authproxy-libcurl ]]; }

# wrk script for forward proxies: connect to the proxy, send absolute-form
# request lines. The request is built once from wrk.path/wrk.headers.
cat > "$TMP/forward.lua" <<EOF
wrk.method = "GET"
wrk.path = "http://$ORIGIN/small.json"
wrk.headers["Host"] = "$ORIGIN"
EOF

RUNS="$TMP/runs.tsv"      # one line per wrk run: name round conns rps p50 p99 errors requests cpu_us_per_req
DL="$TMP/downloads.tsv"   # name MB/s
FAILS="$TMP/failed.tsv"   # name reason
: > "$RUNS"; : > "$DL"; : > "$FAILS"

# Sanity check: correct status and body size through every target, so a proxy
# answering fast with an error page cannot produce a flattering number.
check_body() { # name kind addr path expected_bytes
    local name="$1" kind="$2" addr="$3" path="$4" want="$5" out
    local args=(-s -o /dev/null -w '%{http_code} %{size_download}' --max-time 60)
    if [[ $kind == forward ]]; then
        out=$(curl "${args[@]}" --noproxy '' -x "http://$addr" "http://$ORIGIN$path")
    else
        out=$(curl "${args[@]}" --noproxy '*' "http://$addr$path")
    fi
    if [[ "$out" != "200 $want" ]]; then
        CHECK_ERR="GET $path returned '${out:-nothing}', expected '200 $want'"
        log "  $name: $CHECK_ERR"
        return 1
    fi
}

# authproxy must add token=BENCHKEY to what the origin receives; authproxy-plain must not.
check_token() { # name addr
    local name="$1" addr="$2" want got
    want="args=token=$TOKEN"
    [[ $name == authproxy-plain ]] && want="args="
    got=$(curl -s --max-time 10 --noproxy '' -x "http://$addr" "http://$ORIGIN/echo" || true)
    if [[ "$got" != "$want" ]]; then
        CHECK_ERR="origin saw '${got:-nothing}' for /echo, expected '$want'"
        log "  $name: $CHECK_ERR"
        return 1
    fi
    log "  $name: check ok, origin saw '$got'"
}

run_wrk() { # kind addr conns threads duration -> wrk output on stdout (wrk pinned to the load core)
    local kind="$1" addr="$2" c="$3" t="$4" d="$5"
    if [[ $kind == forward ]]; then
        "${PIN_LOAD[@]}" wrk --latency --timeout 5s -c "$c" -t "$t" -d "${d}s" -s "$TMP/forward.lua" "http://$addr/"
    else
        "${PIN_LOAD[@]}" wrk --latency --timeout 5s -c "$c" -t "$t" -d "${d}s" "http://$addr/small.json"
    fi
}

# Prints: rps p50_ms p99_ms errors requests
parse_wrk() {
    python3 -c '
import re, sys
txt = sys.stdin.read()
def ms(v):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", v)
    n, u = float(m.group(1)), m.group(2)
    return n * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[u]
rps = re.search(r"Requests/sec:\s+([\d.]+)", txt)
p50 = re.search(r"^\s*50%\s+(\S+)", txt, re.M)
p99 = re.search(r"^\s*99%\s+(\S+)", txt, re.M)
reqs = re.search(r"^\s*(\d+) requests in", txt, re.M)
errs = []
m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", txt)
if m:
    for k, v in zip(("connect", "read", "write", "timeout"), m.groups()):
        if int(v): errs.append("%s=%s" % (k, v))
m = re.search(r"Non-2xx or 3xx responses: (\d+)", txt)
if m: errs.append("non2xx=" + m.group(1))
if not (rps and p50 and p99 and reqs):
    print("nan nan nan parse-error 0"); sys.exit(0)
print("%.2f %.3f %.3f %s %s" % (float(rps.group(1)), ms(p50.group(1)), ms(p99.group(1)), ",".join(errs) or "-", reqs.group(1)))
'
}

download_mbps() { # kind addr -> best MB/s (10^6 bytes) of DL_REPEATS (curl pinned to the load core)
    local kind="$1" addr="$2" best=0 out code size speed
    for _ in $(seq 1 "$DL_REPEATS"); do
        if [[ $kind == forward ]]; then
            out=$("${PIN_LOAD[@]}" curl -s -o /dev/null --max-time "$DL_MAX_TIME" -w '%{http_code} %{size_download} %{speed_download}' \
                --noproxy '' -x "http://$addr" "http://$ORIGIN/big.bin")
        else
            out=$("${PIN_LOAD[@]}" curl -s -o /dev/null --max-time "$DL_MAX_TIME" -w '%{http_code} %{size_download} %{speed_download}' \
                --noproxy '*' "http://$addr/big.bin")
        fi
        read -r code size speed <<<"$out"
        if [[ "$code" != 200 || "$size" != "$BIG_BYTES" ]]; then
            log "  download failed: status=$code size=$size"
            continue
        fi
        best=$(python3 -c "print(max($best, $speed / 1e6))")
    done
    [[ "$best" == 0 ]] && best=nan
    printf '%.1f\n' "$best"
}

# One measured wrk run; CPU µs/request = Δ(utime+stime) of the server ÷ requests wrk completed.
measure() { # name kind addr round conns threads
    local name="$1" kind="$2" addr="$3" round="$4" c="$5" t="$6" before after out rps p50 p99 err reqs cpu
    before=$(cpu_ticks "${PID_OF[$name]}")
    out=$(run_wrk "$kind" "$addr" "$c" "$t" "$DURATION")
    after=$(cpu_ticks "${PID_OF[$name]}")
    echo "$out" > "$TMP/wrk-$name-c$c-r$round.txt"
    read -r rps p50 p99 err reqs < <(parse_wrk <<<"$out")
    cpu=$(cpu_us_per_request "$before" "$after" "${reqs:-0}")
    log "  round $round c$c: $rps req/s  cpu=${cpu}µs/req  p50=${p50}ms p99=${p99}ms errors=$err"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$round" "$c" "$rps" "$p50" "$p99" "$err" "$reqs" "$cpu" >> "$RUNS"
}

# Checks first; a target that fails is reported as FAILED and never measured.
ACTIVE=()
for entry in "${TARGETS[@]}"; do
    IFS='|' read -r name kind addr <<<"$entry"
    if is_authproxy "$name" && [[ $SKIP_AUTHPROXY -eq 1 ]]; then
        continue
    fi
    CHECK_ERR=""
    if ! check_body "$name" "$kind" "$addr" /small.json "$SMALL_BYTES" \
        || { is_authproxy "$name" && ! check_token "$name" "$addr"; }; then
        printf '%s\tFAILED: %s\n' "$name" "$CHECK_ERR" >> "$FAILS"
        continue
    fi
    ACTIVE+=("$entry")
done

# Interleaved rounds: every target once per round (c50 then c1), so drift hits all alike.
# --downloads-only skips them (then peak RSS is the download's alone).
[[ $DOWNLOADS_ONLY -eq 1 ]] && ROUNDS=0
for round in $(seq 1 "$ROUNDS"); do
    for entry in "${ACTIVE[@]}"; do
        IFS='|' read -r name kind addr <<<"$entry"
        log "== round $round/$ROUNDS: $name ($kind, $addr)"
        if [[ $round -eq 1 && $WARMUP -gt 0 ]]; then
            run_wrk "$kind" "$addr" 50 2 "$WARMUP" >/dev/null
        fi
        measure "$name" "$kind" "$addr" "$round" 50 2
        measure "$name" "$kind" "$addr" "$round" 1 1
    done
done

for entry in "${ACTIVE[@]}"; do
    IFS='|' read -r name kind addr <<<"$entry"
    before=$(cpu_ticks "${PID_OF[$name]}")
    mbps=$(download_mbps "$kind" "$addr")
    after=$(cpu_ticks "${PID_OF[$name]}")
    # The server's CPU seconds per GiB moved, over all DL_REPEATS downloads (failed ones count as moved).
    cpu_gib=$(python3 -c "print('%.2f' % (($after - $before) / $CLK_TCK / ($DL_REPEATS * $DOWNLOAD_MB / 1024)))")
    log "  $name: $DOWNLOAD_MB MiB download: $mbps MB/s (best of $DL_REPEATS), server CPU ${cpu_gib} s/GiB"
    printf '%s\t%s\t%s\n' "$name" "$mbps" "$cpu_gib" >> "$DL"
done

RSS="$TMP/rss.tsv"
: > "$RSS"
for entry in "${TARGETS[@]}"; do
    IFS='|' read -r name _ _ <<<"$entry"
    if [[ -n "${PID_OF[$name]:-}" ]]; then
        printf '%s\t%s\t%s\n' "$name" "$(peak_rss_mb "${PID_OF[$name]}")" \
            "$(awk '/^Threads:/ {print $2}' "/proc/${PID_OF[$name]}/status" 2>/dev/null || echo n/a)" >> "$RSS"
    else
        printf '%s\tn/a\tn/a\n' "$name" >> "$RSS"
    fi
done

# --------------------------------------------------------------------------
# 4. Report
# --------------------------------------------------------------------------
META="$TMP/meta.txt"
{
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($(nproc) cores)"
    echo "kernel=$(uname -r)"
    echo "os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")"
    echo "nginx=$(ver nginx -v)"
    echo "haproxy=$(ver haproxy -v | sed 's/ - https.*//')"
    echo "squid=$(ver squid -v)"
    echo "wrk=$(ver wrk -v)"
    if [[ $SKIP_AUTHPROXY -eq 0 ]]; then
        echo "authproxy=$AUTHPROXY_BIN"
    else
        echo "authproxy=skipped (--skip-authproxy)"
    fi
    echo "floor=$FLOOR_BIN"
    echo "duration=$DURATION"
    echo "warmup=$WARMUP"
    echo "rounds=$ROUNDS"
    echo "small_bytes=$SMALL_BYTES"
    echo "clk_tck=$CLK_TCK"
    echo "ncpu_onln=$(getconf _NPROCESSORS_ONLN)"
    echo "token=$TOKEN"
    echo "download_mb=$DOWNLOAD_MB"
    echo "downloads_only=$DOWNLOADS_ONLY"
} > "$META"

REPORT="$TMP/report.md"
python3 - "$RUNS" "$DL" "$FAILS" "$RSS" "$META" > "$REPORT" <<'PY'
import statistics, sys
runs_path, dl_path, fails_path, rss_path, meta_path = sys.argv[1:6]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(meta_path) if "=" in l)
rss = {r[0]: r[1:] for r in (l.rstrip("\n").split("\t") for l in open(rss_path))}
dl_rows = [l.rstrip("\n").split("\t") for l in open(dl_path)]
dl = {r[0]: r[1] for r in dl_rows}
dl_cpu = {r[0]: r[2] for r in dl_rows}
fails = dict(l.rstrip("\n").split("\t", 1) for l in open(fails_path))
runs = [l.rstrip("\n").split("\t") for l in open(runs_path)]

def num(s):
    try:
        v = float(s)
        return None if v != v else v
    except (TypeError, ValueError):
        return None

order = ["origin", "authproxy", "authproxy-plain", "authproxy-libcurl", "floor", "haproxy", "nginx-relay", "squid"]
labels = {"origin": "origin (direct)", "authproxy": "authproxy + api-key (forward)",
          "authproxy-plain": "authproxy, no credential (forward)",
          "authproxy-libcurl": "authproxy + api-key, libcurl client (forward)", "floor": "Dispatch floor (reverse)",
          "haproxy": "haproxy (reverse)", "nginx-relay": "nginx-relay (reverse)",
          "squid": "squid (forward)"}

# Median over rounds of each metric, per target and load level.
med, errs = {}, {}
for name in order:
    for c in ("50", "1"):
        rs = [r for r in runs if r[0] == name and r[2] == c]
        if not rs:
            continue
        m = {}
        for i, key in ((3, "rps"), (4, "p50"), (5, "p99"), (8, "cpu")):
            vals = [v for v in (num(r[i]) for r in rs) if v is not None]
            m[key] = statistics.median(vals) if vals else None
        m["n"] = len(rs)
        med[(name, c)] = m
        e = [f"c{c} r{r[1]}: {r[6]}" for r in rs if r[6] != "-"]
        errs.setdefault(name, []).extend(e)

def f(v, fmt):
    return "n/a" if v is None else format(v, fmt)

def ratio(a, b):
    if a is None or b is None or b == 0:
        return "n/a"
    r = a / b
    return f"{r:.2f}" if r >= 0.1 else f"{r:.3f}"

def get(name, c, key):
    return med.get((name, c), {}).get(key)

print("# authproxy benchmark results (same-core comparison)")
print()
print(f"- Date: {meta['date']}")
print(f"- Host: {meta['os']}, kernel {meta['kernel']}, {meta['cpu']}")
print(f"- Peers: {meta['nginx']}; {meta['haproxy']}; {meta['squid']}; {meta['wrk']}")
print(f"- authproxy: {meta['authproxy']} (default workers: 2 per usable CPU, at least 4: 4 when pinned to one "
      f"of the {meta['ncpu_onln']} online CPUs)")
print(f"- floor: {meta['floor']}")
print("- Pinning: every server under test (authproxy, HAProxy `nbthread 1`, nginx-relay `worker_processes 1`, "
      "Squid `-N`, the floor) runs on core 0 (`taskset -c 0`); wrk and the origin nginx share core 1.")
warm = f", a {meta['warmup']} s c50 warm-up before each target's first run" if meta['warmup'] != "0" else ""
print(f"- Load: wrk, {meta['duration']} s per run, {meta['rounds']} interleaved rounds (every target once "
      f"per round, c50 then c1){warm}; each cell is the median over rounds. GET small.json "
      f"({meta['small_bytes']} bytes), keep-alive. c50 = `wrk -c 50 -t 2`, c1 = `wrk -c 1 -t 1`.")
print(f"- CPU µs/req: Δ(utime+stime) of the server process tree (all threads; /proc/PID/stat, "
      f"CLK_TCK={meta['clk_tck']}) over a wrk run ÷ requests wrk completed in it.")
print(f"- authproxy + api-key injects `token={meta['token']}` into every request (checked at the origin); "
      "authproxy, no credential, is the plain relay.")
dl_label = f"{meta['download_mb']} MiB"
print(f"- {dl_label} download = curl (core 1) of big.bin ({int(meta['download_mb']) * 1048576:,} bytes), "
      "best of 3, MB/s with MB = 10^6 bytes; CPU s/GiB = the server's utime+stime over the 3 downloads ÷ GiB moved.")
if meta.get("downloads_only") == "1":
    print("- `--downloads-only`: no wrk runs (their cells are n/a); peak RSS is the downloads' alone.")
print()
print("| target | req/s c50 | CPU µs/req c50 | p50 c50 (ms) | p99 c50 (ms) | req/s c1 | CPU µs/req c1 "
      f"| p50 c1 (ms) | p99 c1 (ms) | MB/s {dl_label} | CPU s/GiB | peak RSS (MB) | threads | wrk errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for name in order:
    r = rss.get(name, ["n/a", "n/a"])
    if name in fails:
        print(f"| {labels[name]} | {fails[name]} |" + " n/a |" * 12)
        continue
    if (name, "50") not in med and name not in dl:
        print(f"| {labels[name]} |" + " n/a |" * 13)
        continue
    mb = num(dl.get(name))
    print(f"| {labels[name]} | {f(get(name,'50','rps'), ',.0f')} | {f(get(name,'50','cpu'), '.1f')} "
          f"| {f(get(name,'50','p50'), '.2f')} | {f(get(name,'50','p99'), '.2f')} "
          f"| {f(get(name,'1','rps'), ',.0f')} | {f(get(name,'1','cpu'), '.1f')} "
          f"| {f(get(name,'1','p50'), '.3f')} | {f(get(name,'1','p99'), '.3f')} "
          f"| {f(mb, ',.0f')} | {dl_cpu.get(name, 'n/a')} | {r[0]} | {r[1]} | {'; '.join(errs.get(name, [])) or '-'} |")
print()
print("Peak RSS is VmHWM at the end of the run, summed over the server's processes "
      "(nginx master + worker); threads is the count at the end of the run. The origin row is the origin "
      "nginx measured directly (on core 1, sharing it with wrk).")
print()
print("## CPU per request relative to HAProxy and to the Dispatch floor")
print()
print("Ratio = target ÷ reference for CPU µs/request (< 1.00 means cheaper per request), and for req/s at c50 "
      f"and the {dl_label} download's MB/s (> 1.00 means faster).")
print()
print("| target | CPU µs/req c50 | ÷ haproxy | ÷ floor | CPU µs/req c1 | ÷ haproxy | ÷ floor | req/s c50 ÷ haproxy "
      "| MB/s ÷ haproxy |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for name in order:
    if name == "origin" or ((name, "50") not in med and name not in dl):
        continue
    c50, c1 = get(name, "50", "cpu"), get(name, "1", "cpu")
    print(f"| {labels[name]} | {f(c50, '.1f')} | {ratio(c50, get('haproxy','50','cpu'))} "
          f"| {ratio(c50, get('floor','50','cpu'))} | {f(c1, '.1f')} | {ratio(c1, get('haproxy','1','cpu'))} "
          f"| {ratio(c1, get('floor','1','cpu'))} | {ratio(get(name,'50','rps'), get('haproxy','50','rps'))} "
          f"| {ratio(num(dl.get(name)), num(dl.get('haproxy')))} |")
print()
print("## Every run")
print()
print("| target | round | conns | req/s | CPU µs/req | p50 (ms) | p99 (ms) | requests | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for r in runs:
    print(f"| {r[0]} | {r[1]} | {r[2]} | {f(num(r[3]), ',.0f')} | {r[8]} | {r[4]} | {r[5]} | {r[7]} | {r[6]} |")
PY

echo
cat "$REPORT"
mkdir -p "$(dirname "$OUT_FILE")"
cp "$REPORT" "$OUT_FILE"
log "report written to $OUT_FILE"
