#!/usr/bin/env bash
# HTTPS interception benchmark: authproxy vs. mitmproxy vs. an nginx TLS reverse proxy vs. the TLS floor.
#
#   bash bench/https.sh [--authproxy PATH] [--floor-tls PATH] [--duration SECONDS] [--warmup SECONDS]
#                       [--out FILE] [--profile DIR] [--syscalls]
#
# --floor-tls PATH is the TLS floor (bench/floor-tls: CONNECT, then TLS with the origin's own certificate, one
# kept-alive upstream TLS connection per client, the token appended to the request line, on Dispatch sources and
# OpenSSL only); without it, bench/floor-tls/.build/release/floor-tls is used, built if missing.
# --profile DIR records a perf cpu-clock profile (-g) of authproxy during its c50 run into DIR/perf.data and
# prints it by shared object and by symbol.
# --syscalls counts the syscalls and context switches of every target during its c50 run (perf stat) and prints
# them per request: counts hardly move with other load on the machine, unlike CPU time.
# The proxy under test and every peer (floor-tls too) run on core 0 (taskset -c 0), tlsload and the origin on
# core 1.
# Everything listens on 127.0.0.1 only and is torn down on exit.
# See bench/README.md ("HTTPS interception") for what is measured and how to read the output.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$BENCH_DIR/.." && pwd)"

AUTHPROXY_BIN=""
FLOOR_TLS_BIN=""
DURATION=10
WARMUP=2
OUT_FILE="$BENCH_DIR/results-https-latest.md"
PROFILE_DIR=""
SYSCALLS=0
TOKEN="BENCHKEY"

usage() {
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --authproxy) AUTHPROXY_BIN="$2"; shift 2 ;;
        --authproxy=*) AUTHPROXY_BIN="${1#*=}"; shift ;;
        --floor-tls) FLOOR_TLS_BIN="$2"; shift 2 ;;
        --floor-tls=*) FLOOR_TLS_BIN="${1#*=}"; shift ;;
        --duration) DURATION="$2"; shift 2 ;;
        --duration=*) DURATION="${1#*=}"; shift ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --warmup=*) WARMUP="${1#*=}"; shift ;;
        --out) OUT_FILE="$2"; shift 2 ;;
        --out=*) OUT_FILE="${1#*=}"; shift ;;
        --profile) PROFILE_DIR="$2"; shift 2 ;;
        --syscalls) SYSCALLS=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

[[ "$DURATION" =~ ^[0-9]+$ && "$DURATION" -ge 1 ]] || { echo "--duration must be a positive integer" >&2; exit 2; }
[[ "$WARMUP" =~ ^[0-9]+$ ]] || { echo "--warmup must be a non-negative integer" >&2; exit 2; }

BENCH_TAG="bench-https"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"

# --------------------------------------------------------------------------
# 1. Packages
# --------------------------------------------------------------------------
need_pkgs=()
command -v nginx    >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need_pkgs+=(nginx-light)
command -v mitmdump >/dev/null 2>&1 || need_pkgs+=(mitmproxy)
command -v openssl  >/dev/null 2>&1 || need_pkgs+=(openssl)
command -v curl     >/dev/null 2>&1 || need_pkgs+=(curl)
command -v python3  >/dev/null 2>&1 || need_pkgs+=(python3)
command -v cc       >/dev/null 2>&1 || need_pkgs+=(gcc libc6-dev)
command -v taskset  >/dev/null 2>&1 || need_pkgs+=(util-linux)
[[ -f /usr/include/openssl/ssl.h ]] || need_pkgs+=(libssl-dev)
install_missing "${need_pkgs[@]}"
export PATH="$PATH:/usr/sbin:/sbin"

# --------------------------------------------------------------------------
# authproxy binary
# --------------------------------------------------------------------------
resolve_authproxy

# The TLS floor (bench/floor-tls), built if missing.
if [[ -z "$FLOOR_TLS_BIN" ]]; then
    FLOOR_TLS_BIN="$BENCH_DIR/floor-tls/.build/release/floor-tls"
    if [[ ! -x "$FLOOR_TLS_BIN" ]]; then
        log "building the TLS floor (swift build -c release --package-path bench/floor-tls)"
        swift build -c release --package-path "$BENCH_DIR/floor-tls" >&2
    fi
fi
[[ -x "$FLOOR_TLS_BIN" ]] || die "floor-tls binary not found or not executable: $FLOOR_TLS_BIN"

# Core pinning (PIN_SERVER / PIN_LOAD from lib.sh): authproxy, mitmproxy, nginx-tls and floor-tls each get core 0
# (one at a time under load); tlsload and the origin nginx share core 1.
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (server on core 0, tlsload + origin on core 1); nproc=$(nproc)"

# --------------------------------------------------------------------------
# 2. Temp dir, ports, cleanup
# --------------------------------------------------------------------------
TMP="$(mktemp -d /tmp/authproxy-bench-https.XXXXXX)"
chmod 755 "$TMP"
LOG_GLOBS=('*.log')
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

read -r P_ORIGIN P_AUTH P_MITM P_NGINX P_FLOOR < <(free_ports 5)
# Forward proxies are asked to CONNECT to localhost:ORIGIN (the name in the origin's
# certificate and in authproxy's credential match). It must resolve to 127.0.0.1 only,
# since the origin listens there and nothing else may be contacted.
getent ahostsv4 localhost | grep -q '^127\.0\.0\.1 ' || die "localhost does not resolve to 127.0.0.1"
ORIGIN_AUTHORITY="localhost:$P_ORIGIN"
log "tmp=$TMP ports: origin=$P_ORIGIN authproxy=$P_AUTH mitmproxy=$P_MITM nginx-tls=$P_NGINX floor-tls=$P_FLOOR"

# Load generator
log "compiling tlsload"
cc -O2 -Wall -o "$TMP/tlsload" "$BENCH_DIR/tlsload.c" -lssl -lcrypto -lpthread

# Content and the origin's self-signed certificate (EC P-256, SAN localhost)
mkdir -p "$TMP/www"
cp "$BENCH_DIR/small.json" "$TMP/www/small.json"
SMALL_BYTES=$(stat -c %s "$TMP/www/small.json")
chmod -R a+rX "$TMP/www"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost" \
    -keyout "$TMP/origin.key" -out "$TMP/origin.pem" 2>"$TMP/openssl.log" \
    || die "openssl req failed: $(cat "$TMP/openssl.log")"

NGINX_USER_LINE=""
[[ $EUID -eq 0 ]] && NGINX_USER_LINE="user root;"

nginx_common() { # dir -> shared http-level settings
    cat <<EOF
    access_log off;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 65s;
    ssl_protocols TLSv1.2 TLSv1.3;
    client_body_temp_path $1/body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
EOF
}

# ---- https nginx origin ----------------------------------------------------
# /echo answers with the query string and X-Token header it received, so the
# token injection of each proxy can be checked without logging during the runs.
mkdir -p "$TMP/nginx-origin"
cat > "$TMP/nginx-origin/nginx.conf" <<EOF
$NGINX_USER_LINE
worker_processes 1;
daemon off;
pid $TMP/nginx-origin/nginx.pid;
error_log $TMP/nginx-origin.log warn;
events { worker_connections 4096; }
http {
    types { application/json json; }
    default_type application/octet-stream;
$(nginx_common "$TMP/nginx-origin")
    sendfile on;
    ssl_session_cache shared:origin:1m;
    server {
        listen 127.0.0.1:$P_ORIGIN ssl;
        ssl_certificate $TMP/origin.pem;
        ssl_certificate_key $TMP/origin.key;
        root $TMP/www;
        location = /echo {
            default_type text/plain;
            return 200 "args=\$args\n";
        }
    }
}
EOF

# ---- nginx TLS-terminating reverse proxy -----------------------------------
# The practical ceiling: no CONNECT, no certificate minting, one TLS hop to the client
# and pooled TLS connections to the origin. Adds token=... to the query like the others.
# One worker: on the single core it is pinned to, more would only take turns.
mkdir -p "$TMP/nginx-tls"
cat > "$TMP/nginx-tls/nginx.conf" <<EOF
$NGINX_USER_LINE
worker_processes 1;
daemon off;
pid $TMP/nginx-tls/nginx.pid;
error_log $TMP/nginx-tls.log warn;
events { worker_connections 4096; }
http {
$(nginx_common "$TMP/nginx-tls")
    upstream origin_tls {
        server 127.0.0.1:$P_ORIGIN;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$P_NGINX ssl;
        ssl_certificate $TMP/origin.pem;
        ssl_certificate_key $TMP/origin.key;
        location / {
            set \$with_token "token=$TOKEN";
            if (\$args) { set \$with_token "\$args&token=$TOKEN"; }
            proxy_pass https://origin_tls\$uri?\$with_token;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host "$ORIGIN_AUTHORITY";
            proxy_ssl_server_name on;
            proxy_ssl_name localhost;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate $TMP/origin.pem;
            proxy_ssl_session_reuse on;
        }
    }
}
EOF

# ---- authproxy (intercepting) ---------------------------------------------
mkdir -p "$TMP/state"
"$AUTHPROXY_BIN" ca init --dir "$TMP/ca" >"$TMP/ca-init.log" 2>&1 \
    || die "authproxy ca init failed: $(cat "$TMP/ca-init.log")"
cat > "$TMP/authproxy.toml" <<EOF
[proxy]
listen = ["127.0.0.1:$P_AUTH"]
connect_ports = [443, $P_ORIGIN]
state_dir = "$TMP/state"
[log]
level = "warning"
[tls]
ca_cert = "$TMP/ca/ca.pem"
ca_key = "$TMP/ca/ca.key"
[[credential]]
name = "trust"
type = "server-trust"
match = "https://$ORIGIN_AUTHORITY"
ca_file = "$TMP/origin.pem"
[[credential]]
name = "key"
type = "api-key"
key = "$TOKEN"
match = "https://$ORIGIN_AUTHORITY"
EOF

# ---- mitmproxy (mitmdump) ---------------------------------------------------
# The addon does the same work as authproxy's api-key credential.
mkdir -p "$TMP/mitm"
cp "$BENCH_DIR/mitm_addon.py" "$TMP/mitm_addon.py"

# --------------------------------------------------------------------------
# Start servers
# --------------------------------------------------------------------------
# curl to a TLS server on 127.0.0.1 by the name localhost, either directly or via a forward proxy.
# curl_https PROXY_PORT|- CAFILE PORT PATH [curl args...]
curl_https() {
    local proxy="$1" ca="$2" port="$3" path="$4"; shift 4
    local args=(-s --max-time 5 --cacert "$ca")
    if [[ "$proxy" == - ]]; then
        args+=(--noproxy '*' --resolve "localhost:$port:127.0.0.1")
    else
        args+=(--noproxy '' -x "http://127.0.0.1:$proxy")
    fi
    curl "${args[@]}" "$@" "https://localhost:$port$path"
}

wait_ready() { # name cmd... (until cmd prints 200)
    local name="$1" code=""; shift
    for _ in $(seq 1 150); do
        kill -0 "${PID_OF[$name]}" 2>/dev/null || die "$name exited during startup"
        code=$("$@" 2>/dev/null || true)
        [[ "$code" == "200" ]] && return 0
        sleep 0.1
    done
    die "$name not ready after 15s (last HTTP status: ${code:-none})"
}

log "starting https nginx origin"
start_bg origin "$TMP/nginx-origin.stdout.log" "${PIN_LOAD[@]}" nginx -p "$TMP/nginx-origin" -e "$TMP/nginx-origin.log" -c "$TMP/nginx-origin/nginx.conf"
wait_ready origin curl_https - "$TMP/origin.pem" "$P_ORIGIN" /small.json -o /dev/null -w '%{http_code}'

log "starting nginx TLS reverse proxy"
start_bg nginx-tls "$TMP/nginx-tls.stdout.log" "${PIN_SERVER[@]}" nginx -p "$TMP/nginx-tls" -e "$TMP/nginx-tls.log" -c "$TMP/nginx-tls/nginx.conf"
wait_ready nginx-tls curl_https - "$TMP/origin.pem" "$P_NGINX" /small.json -o /dev/null -w '%{http_code}'

log "starting authproxy ($AUTHPROXY_BIN)"
start_bg authproxy "$TMP/authproxy.log" "${PIN_SERVER[@]}" "$AUTHPROXY_BIN" serve --config "$TMP/authproxy.toml"
wait_ready authproxy curl -s -o /dev/null -w '%{http_code}' --max-time 1 --noproxy '*' "http://127.0.0.1:$P_AUTH/healthz"

# The TLS floor serves the origin's own certificate (the client trusts it) and verifies the origin against it.
log "starting the TLS floor ($FLOOR_TLS_BIN)"
start_bg floor-tls "$TMP/floor-tls.log" "${PIN_SERVER[@]}" "$FLOOR_TLS_BIN" "$P_FLOOR" "$P_ORIGIN" \
    "$TMP/origin.pem" "$TMP/origin.key" "$TMP/origin.pem" "$TOKEN"
wait_ready floor-tls curl_https "$P_FLOOR" "$TMP/origin.pem" "$P_ORIGIN" /small.json -o /dev/null -w '%{http_code}'

log "starting mitmproxy ($(mitmdump --version 2>/dev/null | head -n1))"
start_bg mitmproxy "$TMP/mitmproxy.log" "${PIN_SERVER[@]}" mitmdump -q \
    --listen-host 127.0.0.1 --listen-port "$P_MITM" \
    --set confdir="$TMP/mitm" \
    --set ssl_verify_upstream_trusted_ca="$TMP/origin.pem" \
    --set flow_detail=0 \
    -s "$TMP/mitm_addon.py"
MITM_CA="$TMP/mitm/mitmproxy-ca-cert.pem"
for _ in $(seq 1 150); do [[ -s "$MITM_CA" ]] && break; sleep 0.1; done
[[ -s "$MITM_CA" ]] || die "mitmproxy did not create $MITM_CA"
wait_ready mitmproxy curl_https "$P_MITM" "$MITM_CA" "$P_ORIGIN" /small.json -o /dev/null -w '%{http_code}'

# --------------------------------------------------------------------------
# 3. Measurements
# --------------------------------------------------------------------------
# name | proxy port (- = direct TLS) | CA the client trusts | TLS port the client names
TARGETS=(
    "origin|-|$TMP/origin.pem|$P_ORIGIN"
    "authproxy|$P_AUTH|$TMP/ca/ca.pem|$P_ORIGIN"
    "mitmproxy|$P_MITM|$MITM_CA|$P_ORIGIN"
    "nginx-tls|-|$TMP/origin.pem|$P_NGINX"
    "floor-tls|$P_FLOOR|$TMP/origin.pem|$P_ORIGIN"
)

RESULTS="$TMP/results.tsv"
: > "$RESULTS"

# Sanity check through every target: small.json arrives byte for byte, and the origin
# saw token=BENCHKEY from the proxies (and no token when reached directly).
check_target() { # name proxy ca port
    local name="$1" proxy="$2" ca="$3" port="$4" want echo
    if ! curl_https "$proxy" "$ca" "$port" /small.json -o "$TMP/check-$name.json" \
        || ! cmp -s "$TMP/check-$name.json" "$TMP/www/small.json"; then
        CHECK_ERR="small.json did not arrive intact"
        return 1
    fi
    want="args=token=$TOKEN"
    [[ $name == origin ]] && want="args="
    echo=$(curl_https "$proxy" "$ca" "$port" "/echo" || true)
    if [[ "$echo" != "$want" ]]; then
        CHECK_ERR="origin saw '${echo:-nothing}' for /echo, expected '$want'"
        return 1
    fi
    # With a query of its own, the token is added to it.
    want="args=f=json&token=$TOKEN"
    [[ $name == origin ]] && want="args=f=json"
    echo=$(curl_https "$proxy" "$ca" "$port" "/echo?f=json" || true)
    if [[ "$echo" != "$want" ]]; then
        CHECK_ERR="origin saw '${echo:-nothing}' for /echo?f=json, expected '$want'"
        return 1
    fi
    log "  check ok: small.json intact ($SMALL_BYTES bytes), origin saw '$echo' for /echo?f=json"
}

run_load() { # proxy ca port conns seconds [extra tlsload args] -> one result line
    local proxy="$1" ca="$2" port="$3" c="$4" d="$5"; shift 5
    local args=(-s localhost -C "$ca" -p /small.json -b "$SMALL_BYTES" -c "$c" -d "$d")
    if [[ "$proxy" == - ]]; then
        args+=(-a "127.0.0.1:$port" -H "localhost:$port")
    else
        args+=(-a "127.0.0.1:$proxy" -t "localhost:$port")
    fi
    "${PIN_LOAD[@]}" "$TMP/tlsload" "${args[@]}" "$@" 2>>"$TMP/tlsload.log"
}

field() { # key line
    sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"
}

for entry in "${TARGETS[@]}"; do
    IFS='|' read -r name proxy ca port <<<"$entry"
    log "== $name"
    CHECK_ERR=""
    if ! check_target "$name" "$proxy" "$ca" "$port"; then
        log "  $name: $CHECK_ERR"
        printf '%s\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tFAILED: %s\tn/a\tn/a\tn/a\tn/a\tn/a\n' \
            "$name" "$CHECK_ERR" >> "$RESULTS"
        continue
    fi
    if [[ $WARMUP -gt 0 ]]; then
        run_load "$proxy" "$ca" "$port" 50 "$WARMUP" >/dev/null
    fi
    row=("$name")
    errs=""
    cpus=()
    resumed="n/a"
    # hs10: a new connection and a full handshake per request; rs10: the same, each handshake resuming the
    # client thread's last session (a returning client).
    for run in "c50|50|" "c1|1|" "hs10|10|-N" "rs10|10|-N -R"; do
        IFS='|' read -r label c extra <<<"$run"
        # CPU µs per request: Δ(utime+stime) of the server's process tree over the run ÷ requests completed.
        before=$(cpu_ticks "${PID_OF[$name]}")
        perf_pid=""
        if [[ -n "$PROFILE_DIR" && $name == authproxy && $label == c50 ]]; then
            mkdir -p "$PROFILE_DIR"
            perf record -q -e cpu-clock -g -p "${PID_OF[$name]}" -o "$PROFILE_DIR/perf.data" >/dev/null 2>&1 &
            perf_pid=$!
            sleep 0.3
        fi
        stat_pid=""
        if [[ $SYSCALLS -eq 1 && $label == c50 ]]; then
            perf stat -x, -e 'syscalls:sys_enter_*' -e context-switches -p "$(tree_pids "${PID_OF[$name]}" | paste -sd,)" \
                -o "$TMP/stat-$name.csv" >/dev/null 2>&1 &
            stat_pid=$!
            sleep 0.3
        fi
        # shellcheck disable=SC2086
        out=$(run_load "$proxy" "$ca" "$port" "$c" "$DURATION" $extra)
        after=$(cpu_ticks "${PID_OF[$name]}")
        if [[ -n "$stat_pid" ]]; then
            kill -INT "$stat_pid"; wait "$stat_pid" || true
            syscalls_per_request "$TMP/stat-$name.csv" "$(field requests "$out")" | sed "s/^/  /" >&2
        fi
        if [[ -n "$perf_pid" ]]; then
            kill -INT "$perf_pid"; wait "$perf_pid" || true
            perf report -i "$PROFILE_DIR/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null \
                | grep -v '^#' | grep -v '^$' | head -15 > "$PROFILE_DIR/by-dso.txt" || true
            perf report -i "$PROFILE_DIR/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null \
                | grep -v '^#' | grep -v '^$' | head -45 > "$PROFILE_DIR/by-symbol.txt" || true
            log "  profile: $PROFILE_DIR/by-dso.txt, $PROFILE_DIR/by-symbol.txt"
        fi
        rps=$(field rps "$out"); p50=$(field p50_ms "$out"); p99=$(field p99_ms "$out"); e=$(field errors "$out")
        reqs=$(field requests "$out")
        cpu=$(cpu_us_per_request "$before" "$after" "${reqs:-0}")
        log "  $label: ${rps:-?} req/s  cpu=${cpu}µs/req  p50=${p50:-?}ms p99=${p99:-?}ms errors=${e:-?}"
        row+=("${rps:-nan}" "${p50:-nan}" "${p99:-nan}")
        cpus+=("$cpu")
        if [[ $label == rs10 ]]; then
            resumed="$(field resumed "$out")/$(field handshakes "$out")"
            log "  rs10: $resumed handshakes resumed a session"
        fi
        [[ "${e:--}" != "-" ]] && errs="${errs:+$errs; }$label: $e"
    done
    row+=("${errs:--}" "${cpus[@]}" "$resumed")
    (IFS=$'\t'; echo "${row[*]}") >> "$RESULTS"
done

RSS="$TMP/rss.tsv"
: > "$RSS"
for name in origin authproxy mitmproxy nginx-tls floor-tls; do
    printf '%s\t%s\n' "$name" "$(peak_rss_mb "${PID_OF[$name]}")" >> "$RSS"
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
    echo "mitmproxy=$(ver mitmdump --version)"
    echo "openssl=$(ver openssl version)"
    echo "authproxy=$AUTHPROXY_BIN"
    echo "floor_tls=$FLOOR_TLS_BIN"
    echo "duration=$DURATION"
    echo "clk_tck=$CLK_TCK"
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
def f_cpu(s):
    v = num(s); return s if v is None else f"{v:.1f}"

print("# authproxy HTTPS interception benchmark results")
print()
print(f"- Date: {meta['date']}")
print(f"- Host: {meta['os']}, kernel {meta['kernel']}, {meta['cpu']}")
print(f"- Peers: {meta['nginx']}; {meta['mitmproxy']}; {meta['openssl']}")
print(f"- authproxy: {meta['authproxy']}")
print(f"- floor-tls ({meta['floor_tls']}) is the TLS floor, bench/floor-tls: the cheapest intercepting relay on Dispatch "
      "sources and OpenSSL (CONNECT, TLS with the origin's own certificate instead of a minted one, one kept-alive "
      "upstream TLS connection per client connection, the token appended to the request line, Content-Length "
      "framing), so authproxy ÷ floor-tls is what authproxy spends above that design.")
warm = f" after a {meta['warmup']} s warm-up at c50" if meta['warmup'] != "0" else ""
print(f"- Load: bench/tlsload.c, {meta['duration']} s per run{warm}, GET small.json "
      f"({meta['small_bytes']} bytes) over HTTPS from a self-signed nginx origin. "
      "Forward proxies get CONNECT localhost:ORIGIN, then TLS to the proxy's minted certificate; "
      "each proxy adds token=BENCHKEY to the query upstream.")
print("- keep-alive: one CONNECT + TLS handshake per connection, then requests back to back. "
      "new conn/s: every request on a new connection (TCP + CONNECT + full TLS handshake + GET), "
      "10 concurrent, no session resumption. resumed conn/s: the same, each handshake offering the session the "
      "client thread last got (tlsload -R, a returning client); 'resumed' counts the handshakes that did resume.")
print("- Pinning: the proxy under test and every peer (authproxy at its default `workers`, mitmproxy, nginx-tls with "
      "one worker, floor-tls) run on core 0 (`taskset -c 0`), one at a time under load; tlsload and the origin nginx share "
      "core 1. The origin row is the origin's own CPU, on core 1 beside tlsload.")
print(f"- CPU µs/req = Δ(utime+stime) of the server's process tree from /proc (CLK_TCK={meta['clk_tck']}) over a "
      "run ÷ requests tlsload completed in it; for new conn/s it is per new connection (CONNECT, handshake, one GET). "
      "Compare this column: req/s is capped by core 1 (tlsload does TLS too).")
print()
print("| target | req/s c50 | CPU µs/req c50 | p50 c50 (ms) | p99 c50 (ms) | req/s c1 | CPU µs/req c1 | p50 c1 (ms) "
      "| p99 c1 (ms) | new conn/s c10 | CPU µs/conn c10 | p50 c10 (ms) | p99 c10 (ms) "
      "| resumed conn/s c10 | CPU µs/conn resumed | p50 resumed (ms) | resumed | peak RSS (MB) | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
by = {}
labels = {"origin": "origin (direct https, no proxy)", "authproxy": "authproxy (CONNECT, intercepting)",
          "mitmproxy": "mitmproxy (CONNECT, intercepting)", "nginx-tls": "nginx-tls (TLS reverse proxy)",
          "floor-tls": "floor-tls (CONNECT, TLS floor)"}
for r in rows:
    name = r[0]
    by[name] = r
    cells = [f_rps(r[1]), f_cpu(r[14]), f_ms(r[2]), f_ms(r[3]), f_rps(r[4]), f_cpu(r[15]), f_ms(r[5]), f_ms(r[6]),
             f_rps(r[7]), f_cpu(r[16]), f_ms(r[8]), f_ms(r[9]), f_rps(r[10]), f_cpu(r[17]), f_ms(r[11]), r[18]]
    print(f"| {labels.get(name, name)} | " + " | ".join(cells) + f" | {rss.get(name, 'n/a')} | {r[13]} |")
print()
print("Peak RSS is VmHWM at the end of the run, summed over the server's processes "
      "(nginx master + workers). Errors are failed requests or connections counted by tlsload "
      "(conn = TCP/CONNECT, tls = handshake, io = read/write, http = wrong status or body size).")
print()
print("## authproxy relative to each peer")
print()
print("Ratio = authproxy ÷ peer: for req/s > 1.00 means authproxy is faster; for CPU < 1.00 means authproxy "
      "needs less CPU per request.")
print()
print("| peer | req/s c50 | req/s c1 | new conn/s c10 | resumed conn/s c10 | CPU/req c50 | CPU/req c1 "
      "| CPU/conn c10 | CPU/conn resumed |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
ap = by.get("authproxy")
def ratio(a, b):
    a, b = num(a), num(b)
    if a is None or b is None or b == 0:
        return "n/a"
    r = a / b
    return f"{r:.2f}" if r >= 0.1 else f"{r:.3f}"
for name in ("mitmproxy", "nginx-tls", "floor-tls"):
    p = by.get(name)
    if p is None:
        continue
    if ap is None:
        print(f"| {name} | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
    else:
        print(f"| {name} | {ratio(ap[1], p[1])} | {ratio(ap[4], p[4])} | {ratio(ap[7], p[7])} | {ratio(ap[10], p[10])} "
              f"| {ratio(ap[14], p[14])} | {ratio(ap[15], p[15])} | {ratio(ap[16], p[16])} | {ratio(ap[17], p[17])} |")
print()
m = by.get("mitmproxy")
r = ratio(ap[1], m[1]) if ap and m else "n/a"
if num(r) is None:
    print("Target (authproxy ≥ 10× mitmproxy keep-alive req/s at c50): n/a.")
else:
    verdict = "met" if num(r) >= 10 else "not met"
    print(f"Target (authproxy ≥ 10× mitmproxy keep-alive req/s at c50): {r}× — {verdict}.")
PY

if [[ -s "$TMP/tlsload.log" ]]; then
    log "tlsload reported errors (first of each kind per run):"
    sort "$TMP/tlsload.log" | uniq -c | sed 's/^/    /' >&2
fi

echo
cat "$REPORT"
mkdir -p "$(dirname "$OUT_FILE")"
cp "$REPORT" "$OUT_FILE"
log "report written to $OUT_FILE"
