#!/usr/bin/env bash
# Benchmark harness: authproxy vs. nginx / HAProxy / Squid on loopback.
#
#   bash bench/run.sh [--authproxy PATH] [--duration SECONDS] [--warmup SECONDS]
#                     [--skip-authproxy] [--out FILE]
#
# Everything listens on 127.0.0.1 only and is torn down on exit.
# See bench/README.md for what is measured and how to read the output.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$BENCH_DIR/.." && pwd)"

AUTHPROXY_BIN=""
DURATION=10
WARMUP=2
SKIP_AUTHPROXY=0
OUT_FILE="$BENCH_DIR/results-latest.md"
BIG_BYTES=$((100 * 1024 * 1024))
DL_REPEATS=3

usage() {
    sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --authproxy) AUTHPROXY_BIN="$2"; shift 2 ;;
        --authproxy=*) AUTHPROXY_BIN="${1#*=}"; shift ;;
        --duration) DURATION="$2"; shift 2 ;;
        --duration=*) DURATION="${1#*=}"; shift ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --warmup=*) WARMUP="${1#*=}"; shift ;;
        --skip-authproxy) SKIP_AUTHPROXY=1; shift ;;
        --out) OUT_FILE="$2"; shift 2 ;;
        --out=*) OUT_FILE="${1#*=}"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

[[ "$DURATION" =~ ^[0-9]+$ && "$DURATION" -ge 1 ]] || { echo "--duration must be a positive integer" >&2; exit 2; }
[[ "$WARMUP" =~ ^[0-9]+$ ]] || { echo "--warmup must be a non-negative integer" >&2; exit 2; }

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
install_missing "${need_pkgs[@]}"
export PATH="$PATH:/usr/sbin:/sbin"

# --------------------------------------------------------------------------
# authproxy binary
# --------------------------------------------------------------------------
if [[ $SKIP_AUTHPROXY -eq 0 ]]; then
    resolve_authproxy
fi

# --------------------------------------------------------------------------
# 2. Temp dir, ports, cleanup
# --------------------------------------------------------------------------
TMP="$(mktemp -d /tmp/authproxy-bench.XXXXXX)"
chmod 755 "$TMP"
LOG_GLOBS=('*.log' 'squid/*.log')
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

read -r P_ORIGIN P_HAPROXY P_NGINX P_SQUID P_AUTH < <(free_ports 5)
ORIGIN="127.0.0.1:$P_ORIGIN"
log "tmp=$TMP ports: origin=$P_ORIGIN haproxy=$P_HAPROXY nginx-relay=$P_NGINX squid=$P_SQUID authproxy=$P_AUTH"

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
    }
}
EOF

# ---- nginx reverse relay ---------------------------------------------------
mkdir -p "$TMP/nginx-relay"
cat > "$TMP/nginx-relay/nginx.conf" <<EOF
$NGINX_USER_LINE
worker_processes auto;
daemon off;
pid $TMP/nginx-relay/nginx.pid;
error_log $TMP/nginx-relay.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    tcp_nodelay on;
    keepalive_requests 100000;
    keepalive_timeout 65s;
    client_body_temp_path $TMP/nginx-relay/body;
    proxy_temp_path $TMP/nginx-relay/proxy;
    fastcgi_temp_path $TMP/nginx-relay/fastcgi;
    uwsgi_temp_path $TMP/nginx-relay/uwsgi;
    scgi_temp_path $TMP/nginx-relay/scgi;
    upstream origin {
        server $ORIGIN;
        keepalive 64;
        keepalive_requests 100000;
    }
    server {
        listen 127.0.0.1:$P_NGINX;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            # stream large bodies through memory buffers, never spool to disk
            proxy_max_temp_file_size 0;
        }
    }
}
EOF

# ---- HAProxy reverse relay -------------------------------------------------
cat > "$TMP/haproxy.cfg" <<EOF
global
    maxconn 4096
    pidfile $TMP/haproxy.pid
    # nbthread left at default (= number of CPUs)

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s

frontend fe
    bind 127.0.0.1:$P_HAPROXY
    default_backend origin

backend origin
    http-reuse always
    server o1 $ORIGIN maxconn 1000
EOF

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
if [[ $SKIP_AUTHPROXY -eq 0 ]]; then
    mkdir -p "$TMP/state"
    cat > "$TMP/authproxy.toml" <<EOF
[proxy]
listen = ["127.0.0.1:$P_AUTH"]
state_dir = "$TMP/state"
[log]
level = "warning"
EOF
    # Optional extra TOML (must start with its own [table] header).
    if [[ -n "${AUTHPROXY_EXTRA_CONFIG:-}" ]]; then
        printf '\n%s\n' "$AUTHPROXY_EXTRA_CONFIG" >> "$TMP/authproxy.toml"
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
start_bg origin "$TMP/nginx-origin.stdout.log" nginx -p "$TMP/nginx-origin" -e "$TMP/nginx-origin.log" -c "$TMP/nginx-origin/nginx.conf"
wait_http origin "http://$ORIGIN/small.json"

log "starting haproxy"
start_bg haproxy "$TMP/haproxy.log" haproxy -db -f "$TMP/haproxy.cfg"
wait_http haproxy "http://127.0.0.1:$P_HAPROXY/small.json"

log "starting nginx relay"
start_bg nginx-relay "$TMP/nginx-relay.stdout.log" nginx -p "$TMP/nginx-relay" -e "$TMP/nginx-relay.log" -c "$TMP/nginx-relay/nginx.conf"
wait_http nginx-relay "http://127.0.0.1:$P_NGINX/small.json"

log "starting squid"
start_bg squid "$TMP/squid.stdout.log" squid -N -f "$TMP/squid/squid.conf"
wait_http squid "http://$ORIGIN/small.json" "127.0.0.1:$P_SQUID"

if [[ $SKIP_AUTHPROXY -eq 0 ]]; then
    log "starting authproxy ($AUTHPROXY_BIN)"
    start_bg authproxy "$TMP/authproxy.log" "$AUTHPROXY_BIN" serve --config "$TMP/authproxy.toml"
    wait_http authproxy "http://127.0.0.1:$P_AUTH/healthz"
fi

# --------------------------------------------------------------------------
# 3. Measurements
# --------------------------------------------------------------------------
# target name | kind (direct|forward) | listen addr
TARGETS=("origin|direct|$ORIGIN" "authproxy|forward|127.0.0.1:$P_AUTH" "haproxy|direct|127.0.0.1:$P_HAPROXY" "nginx-relay|direct|127.0.0.1:$P_NGINX" "squid|forward|127.0.0.1:$P_SQUID")

# wrk script for forward proxies: connect to the proxy, send absolute-form
# request lines. The request is built once from wrk.path/wrk.headers.
cat > "$TMP/forward.lua" <<EOF
wrk.method = "GET"
wrk.path = "http://$ORIGIN/small.json"
wrk.headers["Host"] = "$ORIGIN"
EOF

RESULTS="$TMP/results.tsv"
: > "$RESULTS"

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

run_wrk() { # kind addr conns threads duration -> wrk output on stdout
    local kind="$1" addr="$2" c="$3" t="$4" d="$5"
    if [[ $kind == forward ]]; then
        wrk --latency --timeout 5s -c "$c" -t "$t" -d "${d}s" -s "$TMP/forward.lua" "http://$addr/"
    else
        wrk --latency --timeout 5s -c "$c" -t "$t" -d "${d}s" "http://$addr/small.json"
    fi
}

# Prints: rps p50_ms p99_ms errors
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
errs = []
m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", txt)
if m:
    for k, v in zip(("connect", "read", "write", "timeout"), m.groups()):
        if int(v): errs.append("%s=%s" % (k, v))
m = re.search(r"Non-2xx or 3xx responses: (\d+)", txt)
if m: errs.append("non2xx=" + m.group(1))
if not (rps and p50 and p99):
    print("nan nan nan parse-error"); sys.exit(0)
print("%.2f %.3f %.3f %s" % (float(rps.group(1)), ms(p50.group(1)), ms(p99.group(1)), ",".join(errs) or "-"))
'
}

download_mbps() { # kind addr -> best MB/s (10^6 bytes) of DL_REPEATS
    local kind="$1" addr="$2" best=0 out code size speed
    for _ in $(seq 1 "$DL_REPEATS"); do
        if [[ $kind == forward ]]; then
            out=$(curl -s -o /dev/null --max-time 120 -w '%{http_code} %{size_download} %{speed_download}' \
                --noproxy '' -x "http://$addr" "http://$ORIGIN/big.bin")
        else
            out=$(curl -s -o /dev/null --max-time 120 -w '%{http_code} %{size_download} %{speed_download}' \
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

for entry in "${TARGETS[@]}"; do
    IFS='|' read -r name kind addr <<<"$entry"
    if [[ $name == authproxy && $SKIP_AUTHPROXY -eq 1 ]]; then
        printf '%s\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\n' "$name" >> "$RESULTS"
        continue
    fi
    log "== $name ($kind, $addr)"
    CHECK_ERR=""
    if ! check_body "$name" "$kind" "$addr" /small.json "$SMALL_BYTES"; then
        printf '%s\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tFAILED: %s\n' "$name" "$CHECK_ERR" >> "$RESULTS"
        continue
    fi
    if [[ $WARMUP -gt 0 ]]; then
        run_wrk "$kind" "$addr" 50 2 "$WARMUP" >/dev/null
    fi
    out50=$(run_wrk "$kind" "$addr" 50 2 "$DURATION")
    echo "$out50" > "$TMP/wrk-$name-c50.txt"
    read -r rps50 p50_50 p99_50 err50 < <(parse_wrk <<<"$out50")
    log "  c50: $rps50 req/s  p50=${p50_50}ms p99=${p99_50}ms errors=$err50"
    out1=$(run_wrk "$kind" "$addr" 1 1 "$DURATION")
    read -r rps1 p50_1 p99_1 err1 < <(parse_wrk <<<"$out1")
    log "  c1:  $rps1 req/s  p50=${p50_1}ms p99=${p99_1}ms errors=$err1"
    mbps=$(download_mbps "$kind" "$addr")
    log "  100 MB download: $mbps MB/s (best of $DL_REPEATS)"
    errs="$err50"
    [[ "$err1" != "-" ]] && errs="$errs; c1: $err1"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$name" "$rps50" "$p50_50" "$p99_50" "$rps1" "$p50_1" "$p99_1" "$mbps" "$errs" >> "$RESULTS"
done

RSS="$TMP/rss.tsv"
: > "$RSS"
for name in origin authproxy haproxy nginx-relay squid; do
    if [[ -n "${PID_OF[$name]:-}" ]]; then
        printf '%s\t%s\n' "$name" "$(peak_rss_mb "${PID_OF[$name]}")" >> "$RSS"
    else
        printf '%s\tn/a\n' "$name" >> "$RSS"
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
    echo "duration=$DURATION"
    echo "warmup=$WARMUP"
    echo "small_bytes=$SMALL_BYTES"
} > "$META"

REPORT="$TMP/report.md"
python3 - "$RESULTS" "$RSS" "$META" > "$REPORT" <<'PY'
import sys
res_path, rss_path, meta_path = sys.argv[1:4]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(meta_path) if "=" in l)
rss = dict(l.rstrip("\n").split("\t") for l in open(rss_path))
rows = [l.rstrip("\n").split("\t") for l in open(res_path)]

def num(s):
    try:
        v = float(s)
        return None if v != v else v
    except ValueError:
        return None

def f_rps(s):
    v = num(s); return s if v is None else f"{v:,.0f}"
def f_ms(s):
    v = num(s); return s if v is None else f"{v:.2f}"
def f_mb(s):
    v = num(s); return s if v is None else f"{v:,.0f}"

print("# authproxy benchmark results")
print()
print(f"- Date: {meta['date']}")
print(f"- Host: {meta['os']}, kernel {meta['kernel']}, {meta['cpu']}")
print(f"- Peers: {meta['nginx']}; {meta['haproxy']}; {meta['squid']}; {meta['wrk']}")
print(f"- authproxy: {meta['authproxy']}")
warm = f" after a {meta['warmup']} s warm-up at c50" if meta['warmup'] != "0" else ""
print(f"- Load: wrk, {meta['duration']} s per run{warm}, "
      f"GET small.json ({meta['small_bytes']} bytes, ArcGIS FeatureServer query JSON), keep-alive; "
      "100 MB download = curl of big.bin, best of 3, MB = 10^6 bytes.")
print("- Everything (wrk, origin nginx, proxy under test) shares the same cores over 127.0.0.1, "
      "so absolute numbers are bounded by the load generator and origin; compare rows, not machines.")
print()
print("| target | req/s c50 | p50 c50 (ms) | p99 c50 (ms) | req/s c1 | p50 c1 (ms) | p99 c1 (ms) | MB/s 100MB | peak RSS (MB) | wrk errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
by = {}
for r in rows:
    name, rps50, p50a, p99a, rps1, p50b, p99b, mb, errs = r
    by[name] = r
    label = {"origin": "origin (direct)", "authproxy": "authproxy (forward)",
             "haproxy": "haproxy (reverse)", "nginx-relay": "nginx-relay (reverse)",
             "squid": "squid (forward)"}.get(name, name)
    print(f"| {label} | {f_rps(rps50)} | {f_ms(p50a)} | {f_ms(p99a)} | {f_rps(rps1)} | {f_ms(p50b)} | "
          f"{f_ms(p99b)} | {f_mb(mb)} | {rss.get(name, 'n/a')} | {errs} |")
print()
print("Peak RSS is VmHWM at the end of the run, summed over the server's processes "
      "(nginx master + workers).")
print()
print("## authproxy relative to each peer")
print()
print("Ratio = authproxy ÷ peer (> 1.00 means authproxy is faster).")
print()
print("| peer | req/s c50 | req/s c1 | MB/s 100MB |")
print("|---|---:|---:|---:|")
ap = by.get("authproxy")
def ratio(a, b):
    a, b = num(a), num(b)
    if a is None or b is None or b == 0:
        return "n/a"
    r = a / b
    return f"{r:.2f}" if r >= 0.1 else f"{r:.3f}"
for name in ("origin", "haproxy", "nginx-relay", "squid"):
    p = by.get(name)
    if p is None:
        continue
    if ap is None:
        print(f"| {name} | n/a | n/a | n/a |")
    else:
        print(f"| {name} | {ratio(ap[1], p[1])} | {ratio(ap[4], p[4])} | {ratio(ap[7], p[7])} |")
PY

echo
cat "$REPORT"
mkdir -p "$(dirname "$OUT_FILE")"
cp "$REPORT" "$OUT_FILE"
log "report written to $OUT_FILE"
