#!/usr/bin/env bash
# Soak test: authproxy under a light, steady mix of traffic for a long time; fails if memory, fds or threads grow.
#
#   bash bench/soak.sh [BINARY] [--minutes N] [--rate R] [--sample-seconds S] [--out DIR]
#                      [--ttl SECONDS] [--expire-seconds S] [--log-level LEVEL] [--heaptrack]
#                      [--http-client native|libcurl]
#
# BINARY      authproxy to test (default .build/release/authproxy, built if missing)
# --minutes   duration of the load (default 30)
# --rate      target requests/s of the whole mix (default 180)
# --sample-seconds  how often VmRSS, RssAnon, open fds and threads of authproxy are read (default 30)
# --out       directory for samples.tsv, report.md, arcgis-stats.json, proxy-notices.log
#             (default bench/results-soak-latest/, a scratch directory)
# --ttl       token lifetime at the ArcGIS test server (default 20 s: the proxy refreshes a token every ~18 s)
# --expire-seconds  force every token to expire this often (default 60; the proxy then sees 498 and replays)
# --log-level authproxy's log level (default info: the access log runs, into a temp file)
# --heaptrack run authproxy under heaptrack; the profile is copied to --out (RSS figures then include
#             heaptrack's own memory, so use it to find allocation sites, not for the verdict)
# --http-client  `[proxy] http_client` for the plain http:// lanes (default: the proxy's default, native)
#
# Started on 127.0.0.1 only (free ports), stopped on exit: the ArcGIS test server (Tests/e2e/arcgis/server.py,
# role server, user soak), one nginx serving plain http (small.json, /echo, 4 MiB and 32 MiB files, /upload)
# and https (self-signed EC cert for localhost), and authproxy with an arcgis-token credential (username and
# password against the test server), an api-key credential for both origins, [tls] interception with a CA
# from `authproxy ca init`, and a server-trust credential for the https origin. bench/soakload.py sends the
# traffic (see its docstring) and samples /proc/PID.
#
# Verdict (exit 0 = PASS, 1 = FAIL). Warm-up W = 5 minutes, or a third of the run when that is shorter.
# Of the samples taken after W, "first" = the first k and "last" = the last k, k = min(3, a third of them).
#   RSS:     FAIL if median(VmRSS of last) > 1.10 × median(VmRSS of first)       (more than 10 % growth)
#   fds:     FAIL if min(fds of last) > max(fds of first)       (pool jitter allowed, a rising floor is not)
#   threads: FAIL if min(threads of last) > max(threads of first)
#   FAIL also if any request failed (status other than 200, wrong body, missing token, connection error;
#   deliberately aborted downloads are counted apart) or authproxy exited. Exit 2 or more: the set-up failed.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$BENCH_DIR/.." && pwd)"

AUTHPROXY_BIN=""
MINUTES=30
RATE=180
SAMPLE=30
OUT_DIR="$BENCH_DIR/results-soak-latest"
TTL=20
EXPIRE=60
LOG_LEVEL=info
HEAPTRACK=0
HTTP_CLIENT=""
API_KEY="SOAKKEY0123456789"

usage() { sed -n '2,34p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --minutes) MINUTES="$2"; shift 2 ;;
        --rate) RATE="$2"; shift 2 ;;
        --sample-seconds) SAMPLE="$2"; shift 2 ;;
        --out) OUT_DIR="$2"; shift 2 ;;
        --ttl) TTL="$2"; shift 2 ;;
        --expire-seconds) EXPIRE="$2"; shift 2 ;;
        --log-level) LOG_LEVEL="$2"; shift 2 ;;
        --heaptrack) HEAPTRACK=1; shift ;;
        --http-client) HTTP_CLIENT="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
        *) [[ -z "$AUTHPROXY_BIN" ]] || { echo "one BINARY only" >&2; exit 2; }; AUTHPROXY_BIN="$1"; shift ;;
    esac
done
num='^[0-9]+([.][0-9]+)?$'
for v in "$MINUTES" "$RATE" "$SAMPLE" "$TTL" "$EXPIRE"; do
    [[ "$v" =~ $num ]] || { echo "not a positive number: $v" >&2; exit 2; }
done
case "$HTTP_CLIENT" in ""|native|libcurl) ;; *) echo "--http-client: native or libcurl, not $HTTP_CLIENT" >&2; exit 2 ;; esac
HTTP_CLIENT_LINE=""
[[ -z "$HTTP_CLIENT" ]] || HTTP_CLIENT_LINE="http_client = \"$HTTP_CLIENT\""

BENCH_TAG="soak"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"
die() { log "ERROR: $*"; exit 2; }   # a set-up failure is not a FAIL verdict (exit 1)

need_pkgs=()
command -v nginx   >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need_pkgs+=(nginx-light)
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
command -v curl    >/dev/null 2>&1 || need_pkgs+=(curl)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
[[ $HEAPTRACK -eq 0 ]] || command -v heaptrack >/dev/null 2>&1 || need_pkgs+=(heaptrack)
install_missing "${need_pkgs[@]}"
export PATH="$PATH:/usr/sbin:/sbin"
resolve_authproxy
getent ahostsv4 localhost | grep -q '^127\.0\.0\.1 ' || die "localhost does not resolve to 127.0.0.1"

TMP="$(mktemp -d /tmp/authproxy-soak.XXXXXX)"
chmod 755 "$TMP"
LOG_GLOBS=('*.log')
VERDICT_GIVEN=0
# A FAIL verdict (exit 1 after the report) needs no dump of the servers' logs; any other failure does.
# (set +e: under set -e the `(exit "$rc")` that hands rc to cleanup would end the trap before cleanup ran.)
soak_cleanup() {
    local rc=$?
    set +e
    if [[ $rc -eq 1 && $VERDICT_GIVEN -eq 1 ]]; then LOG_GLOBS=(); fi
    (exit "$rc")
    cleanup
}
trap soak_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"

read -r P_ARCGIS P_HTTP P_HTTPS P_PROXY < <(free_ports 4)
log "tmp=$TMP out=$OUT_DIR ports: arcgis=$P_ARCGIS http=$P_HTTP https=$P_HTTPS authproxy=$P_PROXY"

# ---- content and the https origin's certificate -----------------------------------------------------------
mkdir -p "$TMP/www"
cp "$BENCH_DIR/small.json" "$TMP/www/small.json"
head -c $((4 * 1024 * 1024)) /dev/urandom > "$TMP/www/dl.bin"
head -c $((32 * 1024 * 1024)) /dev/urandom > "$TMP/www/big.bin"
chmod -R a+rX "$TMP/www"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost" \
    -keyout "$TMP/origin.key" -out "$TMP/origin.pem" 2>"$TMP/openssl.log" \
    || die "openssl req failed: $(cat "$TMP/openssl.log")"

# ---- nginx: plain and https origin (one worker) ------------------------------------------------------------
NGINX_USER_LINE=""
[[ $EUID -eq 0 ]] && NGINX_USER_LINE="user root;"
mkdir -p "$TMP/nginx"
cat > "$TMP/nginx/nginx.conf" <<EOF
$NGINX_USER_LINE
worker_processes 1;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx.log warn;
events { worker_connections 4096; }
http {
    types { application/json json; }
    default_type application/octet-stream;
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 65s;
    sendfile on;
    client_max_body_size 64m;
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    server {
        listen 127.0.0.1:$P_HTTP;
        listen 127.0.0.1:$P_HTTPS ssl;
        ssl_certificate $TMP/origin.pem;
        ssl_certificate_key $TMP/origin.key;
        root $TMP/www;
        location = /echo { default_type text/plain; return 200 "args=\$args\n"; }
        location = /upload { default_type text/plain; return 200 "args=\$args\n"; }
    }
}
EOF
start_bg nginx "$TMP/nginx-run.log" nginx -c "$TMP/nginx/nginx.conf"

# ---- ArcGIS test server ------------------------------------------------------------------------------------
start_bg arcgis "$TMP/arcgis.log" python3 "$REPO_ROOT/Tests/e2e/arcgis/server.py" --port "$P_ARCGIS" \
    --role server --ttl "$TTL" --user soak:soak-pass

# ---- authproxy ----------------------------------------------------------------------------------------------
"$AUTHPROXY_BIN" ca init --dir "$TMP/ca" >"$TMP/ca-init.log" 2>&1 \
    || die "authproxy ca init failed: $(cat "$TMP/ca-init.log")"
mkdir -p "$TMP/state"
cat > "$TMP/proxy.conf" <<EOF
[proxy]
listen = ["127.0.0.1:$P_PROXY"]
connect_ports = [443, $P_HTTPS]
state_dir = "$TMP/state"
$HTTP_CLIENT_LINE
[log]
level = "$LOG_LEVEL"
[tls]
ca_cert = "$TMP/ca/ca.pem"
ca_key = "$TMP/ca/ca.key"
[[credential]]
name = "enterprise"
type = "arcgis-token"
username = "soak"
password = "soak-pass"
match = "http://127.0.0.1:$P_ARCGIS/arcgis"
[[credential]]
name = "key"
type = "api-key"
key = "$API_KEY"
match = ["http://127.0.0.1:$P_HTTP", "https://localhost:$P_HTTPS"]
[[credential]]
name = "trust"
type = "server-trust"
match = "https://localhost:$P_HTTPS"
ca_file = "$TMP/origin.pem"
EOF
"$AUTHPROXY_BIN" check --config "$TMP/proxy.conf" >"$TMP/check.log" 2>&1 \
    || die "authproxy check failed: $(cat "$TMP/check.log")"
if [[ $HEAPTRACK -eq 1 ]]; then
    start_bg authproxy "$TMP/proxy.log" heaptrack -o "$TMP/heaptrack.authproxy" \
        "$AUTHPROXY_BIN" serve --config "$TMP/proxy.conf"
else
    start_bg authproxy "$TMP/proxy.log" "$AUTHPROXY_BIN" serve --config "$TMP/proxy.conf"
fi

# The pid to sample is authproxy's own (under heaptrack it is a child of heaptrack's shell script).
PROXY_PID=""
for _ in $(seq 1 150); do
    if curl -s --noproxy '*' -o /dev/null "http://127.0.0.1:$P_PROXY/healthz"; then
        PROXY_PID=$(python3 - "$P_PROXY" <<'PY'
import os, sys
port = int(sys.argv[1])
inodes = set()
with open("/proc/net/tcp") as f:
    for line in list(f)[1:]:
        p = line.split()
        if int(p[1].split(":")[1], 16) == port and p[3] == "0A":   # LISTEN
            inodes.add(p[9])
for d in os.listdir("/proc"):
    if not d.isdigit():
        continue
    try:
        for fd in os.listdir("/proc/%s/fd" % d):
            l = os.readlink("/proc/%s/fd/%s" % (d, fd))
            if l.startswith("socket:[") and l[8:-1] in inodes:
                print(d); sys.exit(0)
    except OSError:
        pass
PY
)
        break
    fi
    sleep 0.2
done
[[ -n "$PROXY_PID" ]] || die "authproxy did not start"
for _ in $(seq 1 50); do curl -s --noproxy '*' -o /dev/null "http://127.0.0.1:$P_ARCGIS/arcgis/rest/info?f=json" && break; sleep 0.2; done

# ---- pre-flight: every kind of request works once ----------------------------------------------------------
Q="http://127.0.0.1:$P_ARCGIS/arcgis/rest/services/Secure/Points/FeatureServer/0/query?where=1%3D1&f=json"
curl -sf -x "http://127.0.0.1:$P_PROXY" "$Q" | grep -q '"features"' || die "pre-flight: arcgis query through the proxy failed"
curl -sf -x "http://127.0.0.1:$P_PROXY" "http://127.0.0.1:$P_HTTP/echo?f=json" | grep -q "token=$API_KEY" \
    || die "pre-flight: api-key not injected on the plain origin"
curl -sf -x "http://127.0.0.1:$P_PROXY" --cacert "$TMP/ca/ca.pem" "https://localhost:$P_HTTPS/echo?f=json" \
    | grep -q "token=$API_KEY" || die "pre-flight: intercepted https request failed"
log "pre-flight ok; authproxy pid $PROXY_PID; ${MINUTES} min at ${RATE} req/s, a sample every ${SAMPLE} s"

# ---- the soak ------------------------------------------------------------------------------------------------
rc=0
python3 "$BENCH_DIR/soakload.py" --proxy "127.0.0.1:$P_PROXY" --pid "$PROXY_PID" \
    --arcgis "http://127.0.0.1:$P_ARCGIS" --origin "http://127.0.0.1:$P_HTTP" --https-port "$P_HTTPS" \
    --ca "$TMP/ca/ca.pem" --api-key "$API_KEY" --minutes "$MINUTES" --rate "$RATE" \
    --sample-seconds "$SAMPLE" --expire-seconds "$EXPIRE" --out "$OUT_DIR" || rc=$?

# Log lines other than the access log (warnings, errors, token notices) are kept; the access log is not.
grep -v ' status=' "$TMP/proxy.log" > "$OUT_DIR/proxy-notices.log" || true
log "access-log lines: $(grep -c ' status=' "$TMP/proxy.log" || true); other log lines: $(wc -l < "$OUT_DIR/proxy-notices.log") (in $OUT_DIR/proxy-notices.log)"
if [[ $HEAPTRACK -eq 1 ]]; then
    kill -TERM "$PROXY_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$PROXY_PID" 2>/dev/null || break; sleep 0.2; done
    sleep 2
    cp "$TMP"/heaptrack.authproxy* "$OUT_DIR/" 2>/dev/null && log "heaptrack profile in $OUT_DIR"
fi
[[ $rc -le 1 ]] || die "soakload.py failed (rc=$rc)"
VERDICT_GIVEN=1
log "report: $OUT_DIR/report.md"
exit "$rc"
