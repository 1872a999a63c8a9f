#!/usr/bin/env bash
# Idle keep-alive connections: resident memory per connection, authproxy vs. HAProxy (issue 10's
# "10,000 idle keep-alive connections ≤ 2 kB each").
#
#   bash bench/idle.sh [BINARY] [--conns N] [--window W] [--rounds R] [--skip-haproxy] [--out FILE]
#                      [--header-bytes B] [--query-bytes Q] [--body-kb K] [--read-delay S] [--heaptrack]
#
# BINARY defaults to .build/release/authproxy (built if missing). For each round and target a fresh server is
# started (pinned to core 0), bench/idleload.py (core 1, with the nginx origin) opens N connections (default
# 10000) and sends nothing, then one GET of small.json on each, and keeps them all open; the server's VmRSS
# is read before, after the bare connections and after the exchanges. Listens on 127.0.0.1 only.
# Variants: --header-bytes/--query-bytes make browser-sized request heads and URLs; --body-kb K fetches a K KiB
# file instead of small.json, and --read-delay S lets each response wait S seconds before the client reads it
# (so the server queues it), to see what a connection keeps after a large or slow exchange.
# --heaptrack runs authproxy under heaptrack, kills it while every connection is idle and lists the heap still
# allocated per connection by allocation site (bench/heapsites.py); its RSS figures include heaptrack's own.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$BENCH_DIR/.." && pwd)"

AUTHPROXY_BIN=""
CONNS=10000
WINDOW=32
ROUNDS=1
SKIP_HAPROXY=0
HEADER_BYTES=0
QUERY_BYTES=0
BODY_KB=0
READ_DELAY=0
HEAPTRACK=0
WAIT_SECONDS=10   # for a server to answer after its start (60 under heaptrack)
OUT_FILE="$BENCH_DIR/results-idle-latest.md"

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

if [[ $# -gt 0 && "$1" != -* ]]; then AUTHPROXY_BIN="$1"; shift; fi
while [[ $# -gt 0 ]]; do
    case "$1" in
        --conns) CONNS="$2"; shift 2 ;;
        --window) WINDOW="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --skip-haproxy) SKIP_HAPROXY=1; shift ;;
        --header-bytes) HEADER_BYTES="$2"; shift 2 ;;
        --query-bytes) QUERY_BYTES="$2"; shift 2 ;;
        --body-kb) BODY_KB="$2"; shift 2 ;;
        --read-delay) READ_DELAY="$2"; shift 2 ;;
        --heaptrack) HEAPTRACK=1; WAIT_SECONDS=60; shift ;;
        --out) OUT_FILE="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
[[ "$CONNS" =~ ^[0-9]+$ && "$CONNS" -ge 100 ]] || { echo "--conns must be an integer ≥ 100" >&2; exit 2; }
[[ "$WINDOW" =~ ^[0-9]+$ && "$WINDOW" -ge 1 ]] || { echo "--window must be a positive integer" >&2; exit 2; }
[[ "$ROUNDS" =~ ^[0-9]+$ && "$ROUNDS" -ge 1 ]] || { echo "--rounds must be a positive integer" >&2; exit 2; }
for v in "$HEADER_BYTES" "$QUERY_BYTES" "$BODY_KB"; do
    [[ "$v" =~ ^[0-9]+$ ]] || { echo "--header-bytes, --query-bytes and --body-kb take non-negative integers" >&2; exit 2; }
done
[[ "$READ_DELAY" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "--read-delay takes seconds" >&2; exit 2; }

BENCH_TAG="idle"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"

need_pkgs=()
command -v nginx   >/dev/null 2>&1 || [[ -x /usr/sbin/nginx   ]] || need_pkgs+=(nginx-light)
[[ $SKIP_HAPROXY -eq 1 ]] || command -v haproxy >/dev/null 2>&1 || [[ -x /usr/sbin/haproxy ]] || need_pkgs+=(haproxy)
command -v curl    >/dev/null 2>&1 || need_pkgs+=(curl)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
command -v taskset >/dev/null 2>&1 || need_pkgs+=(util-linux)
[[ $HEAPTRACK -eq 0 ]] || command -v heaptrack_print >/dev/null 2>&1 || need_pkgs+=(heaptrack)
install_missing "${need_pkgs[@]}"
export PATH="$PATH:/usr/sbin:/sbin"
resolve_authproxy

[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (server on core 0, load + origin on core 1); nproc=$(nproc)"
PIN_SERVER=(taskset -c 0)
PIN_LOAD=(taskset -c 1)

# Every process started from here inherits the limit: the load holds CONNS sockets, the server as many.
want_fds=$((CONNS + WINDOW + 1024))
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[[ $(ulimit -n) -ge $want_fds ]] || die "open-file limit $(ulimit -n) < $want_fds needed for --conns $CONNS (raise ulimit -n)"

TMP="$(mktemp -d /tmp/authproxy-idle.XXXXXX)"
chmod 755 "$TMP"
LOG_GLOBS=('*.log')
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

read -r P_ORIGIN P_AUTH P_HAPROXY < <(free_ports 3)
ORIGIN="127.0.0.1:$P_ORIGIN"
log "tmp=$TMP ports: origin=$P_ORIGIN authproxy=$P_AUTH haproxy=$P_HAPROXY; conns=$CONNS window=$WINDOW rounds=$ROUNDS fd limit=$(ulimit -n)"

mkdir -p "$TMP/www"
cp "$BENCH_DIR/small.json" "$TMP/www/small.json"
chmod -R a+rX "$TMP/www"
SMALL_BYTES=$(stat -c %s "$TMP/www/small.json")
FETCH_PATH=/small.json
FETCH_BYTES=$SMALL_BYTES
if [[ $BODY_KB -gt 0 ]]; then
    head -c $((BODY_KB * 1024)) /dev/urandom > "$TMP/www/body.bin"
    chmod a+r "$TMP/www/body.bin"
    FETCH_PATH=/body.bin
    FETCH_BYTES=$((BODY_KB * 1024))
fi
if [[ $QUERY_BYTES -gt 0 ]]; then
    FETCH_PATH="$FETCH_PATH?q=$(head -c "$QUERY_BYTES" /dev/zero | tr '\0' 'q')"
fi
NGINX_USER_LINE=""
[[ $EUID -eq 0 ]] && NGINX_USER_LINE="user root;"

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
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 3600s;
    client_body_temp_path $TMP/nginx-origin/body;
    proxy_temp_path $TMP/nginx-origin/proxy;
    fastcgi_temp_path $TMP/nginx-origin/fastcgi;
    uwsgi_temp_path $TMP/nginx-origin/uwsgi;
    scgi_temp_path $TMP/nginx-origin/scgi;
    server { listen 127.0.0.1:$P_ORIGIN; root $TMP/www; }
}
EOF

# authproxy as in ab.sh (api-key credential injecting a token into every request), with room for every
# connection: the limits are per process and per client address, and idle/new connections must not time out
# during the run.
MAXC=$((CONNS + WINDOW + 1000))
mkdir -p "$TMP/state"
cat > "$TMP/authproxy.toml" <<EOF
[proxy]
listen = ["127.0.0.1:$P_AUTH"]
state_dir = "$TMP/state"
max_connections = $MAXC
max_connections_per_client = $MAXC
idle_timeout_seconds = 3600
header_timeout_seconds = 3600
[log]
level = "warning"
[[credential]]
name = "bench"
type = "api-key"
key = "BENCHKEY0123456789"
match = "http://$ORIGIN"
EOF
"$AUTHPROXY_BIN" check --config "$TMP/authproxy.toml" >/dev/null || die "authproxy check rejected $TMP/authproxy.toml"

# HAProxy as in run.sh (reverse relay, one thread), with room for every connection and long timeouts.
# HAProxy 2.6 refuses to start unless the open-file limit covers 2 × maxconn + 14 (a server-side socket per
# client connection); when the limit (which only CAP_SYS_RESOURCE may raise) is too low for that, HAProxy is
# measured with fewer connections, in hundreds: per-connection figures stay comparable.
H_MAXC=$MAXC
H_CONNS=$CONNS
if (( 2 * H_MAXC + 64 > $(ulimit -n) )); then
    H_MAXC=$(( ($(ulimit -n) - 64) / 2 ))
    H_CONNS=$(( (H_MAXC - WINDOW - 50) / 100 * 100 ))
    (( H_CONNS < CONNS )) || H_CONNS=$CONNS
    log "open-file limit $(ulimit -n): HAProxy gets maxconn $H_MAXC and is measured with $H_CONNS connections"
fi
cat > "$TMP/haproxy.cfg" <<EOF
global
    maxconn $H_MAXC
    pidfile $TMP/haproxy.pid
    nbthread 1

defaults
    mode http
    option http-keep-alive
    maxconn $H_MAXC
    timeout connect 5s
    timeout client 3600s
    timeout server 60s
    timeout http-request 3600s
    timeout http-keep-alive 3600s

frontend fe
    bind 127.0.0.1:$P_HAPROXY
    default_backend origin

backend origin
    http-reuse always
    server o1 $ORIGIN maxconn 1000
EOF

wait_http() { # name url [proxy]   (waits WAIT_SECONDS)
    local name="$1" url="$2" proxy="${3:-}" code=""
    local args=(-s -o /dev/null -w '%{http_code}' --max-time 1)
    if [[ -n "$proxy" ]]; then args+=(--noproxy '' -x "http://$proxy"); else args+=(--noproxy '*'); fi
    for _ in $(seq 1 $((WAIT_SECONDS * 10))); do
        kill -0 "${PID_OF[$name]}" 2>/dev/null || die "$name exited during startup"
        code=$(curl "${args[@]}" "$url" 2>/dev/null || true)
        [[ "$code" == "200" ]] && return 0
        sleep 0.1
    done
    die "$name not ready after ${WAIT_SECONDS}s (last HTTP status: ${code:-none}) at $url"
}

# Stops one server started with start_bg and forgets its pid (so cleanup never signals a reused pid).
stop_bg() { # name
    local name="$1" pid="${PID_OF[$1]}" keep=() p
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
    unset "PID_OF[$name]"
}

log "starting nginx origin (core 1)"
start_bg origin "$TMP/nginx-origin.stdout.log" "${PIN_LOAD[@]}" nginx -p "$TMP/nginx-origin" -e "$TMP/nginx-origin.log" -c "$TMP/nginx-origin/nginx.conf"
wait_http origin "http://$ORIGIN/small.json"

TARGETS=("authproxy|forward|$P_AUTH|$CONNS")
[[ $SKIP_HAPROXY -eq 1 ]] || TARGETS+=("haproxy|direct|$P_HAPROXY|$H_CONNS")
RESULTS="$TMP/results.jsonl"
: > "$RESULTS"

for round in $(seq 1 "$ROUNDS"); do
    for entry in "${TARGETS[@]}"; do
        IFS='|' read -r name mode port n <<<"$entry"
        log "== round $round/$ROUNDS: $name"
        pid=""
        on_idle=()
        if [[ $name == authproxy && $HEAPTRACK -eq 1 ]]; then
            # heaptrack's script starts authproxy as its child: that child is the process measured, and it is
            # killed while every connection is idle, so what heaptrack reports as leaked is what they hold.
            start_bg authproxy "$TMP/authproxy-r$round.log" "${PIN_SERVER[@]}" heaptrack -o "$TMP/heap-r$round" \
                "$AUTHPROXY_BIN" serve --config "$TMP/authproxy.toml"
            wait_http authproxy "http://127.0.0.1:$P_AUTH/healthz"
            pid=$(pgrep -P "${PID_OF[authproxy]}" -x authproxy | head -n1)
            [[ -n "$pid" ]] || die "no authproxy process under heaptrack (pid ${PID_OF[authproxy]})"
            on_idle=(--on-idle "kill -KILL $pid")
        elif [[ $name == authproxy ]]; then
            start_bg authproxy "$TMP/authproxy-r$round.log" "${PIN_SERVER[@]}" "$AUTHPROXY_BIN" serve --config "$TMP/authproxy.toml"
            wait_http authproxy "http://127.0.0.1:$P_AUTH/healthz"
        else
            start_bg haproxy "$TMP/haproxy-r$round.log" "${PIN_SERVER[@]}" haproxy -db -f "$TMP/haproxy.cfg"
            wait_http haproxy "http://127.0.0.1:$P_HAPROXY/small.json"
        fi
        rc=0
        out=$("${PIN_LOAD[@]}" python3 "$BENCH_DIR/idleload.py" --server "127.0.0.1:$port" --origin "$ORIGIN" \
            --mode "$mode" --pid "${pid:-${PID_OF[$name]}}" --conns "$n" --window "$WINDOW" "${on_idle[@]}" \
            --path "$FETCH_PATH" --expect-bytes "$FETCH_BYTES" --header-bytes "$HEADER_BYTES" \
            --read-delay "$READ_DELAY") || rc=$?
        if [[ -n "$pid" ]]; then
            # heaptrack's script exits once it has written its data file.
            for _ in $(seq 1 600); do kill -0 "${PID_OF[$name]}" 2>/dev/null || break; sleep 0.1; done
        fi
        stop_bg "$name"
        [[ -n "$out" ]] || die "idleload gave no result for $name (rc=$rc)"
        if [[ -n "$pid" ]]; then
            heap=$(ls "$TMP"/heap-r"$round".* 2>/dev/null | head -n1)
            [[ -n "$heap" ]] || die "heaptrack wrote no data file"
            heaptrack_print -f "$heap" -p 0 -a 0 -T 0 -l 0 -F "$TMP/leaked-r$round.stacks" \
                --flamegraph-cost-type leaked >/dev/null 2>&1 || die "heaptrack_print failed on $heap"
            python3 "$BENCH_DIR/heapsites.py" "$TMP/leaked-r$round.stacks" "$n" > "$TMP/heapsites-r$round.md"
            log "  heap per connection at idle (heaptrack, round $round):"
            cat "$TMP/heapsites-r$round.md" >&2
        fi
        [[ $rc -eq 0 ]] || log "  $name: idleload reported errors or closed connections (rc=$rc): $out"
        printf '{"target": "%s", "round": %d, "result": %s}\n' "$name" "$round" "$out" >> "$RESULTS"
    done
done

REPORT="$TMP/report.md"
VARIANT="GET small.json ($SMALL_BYTES bytes)"
[[ $BODY_KB -gt 0 ]] && VARIANT="GET body.bin ($FETCH_BYTES bytes)"
[[ $QUERY_BYTES -gt 0 ]] && VARIANT="$VARIANT, a $QUERY_BYTES-byte query string"
[[ $HEADER_BYTES -gt 0 ]] && VARIANT="$VARIANT, an X-Pad header of $HEADER_BYTES bytes"
[[ $READ_DELAY != 0 ]] && VARIANT="$VARIANT, the client reading each response after $READ_DELAY s"
python3 - "$RESULTS" "$AUTHPROXY_BIN" "$CONNS" "$WINDOW" "$(ver haproxy -v | sed 's/ - https.*//')" "$VARIANT" > "$REPORT" <<'PY'
import json, statistics, sys, time
path, binary, conns, window, hap, variant = sys.argv[1:7]
rows = [json.loads(l) for l in open(path)]
print("# Idle keep-alive connections: resident memory per connection")
print()
print(f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
print(f"- authproxy: {binary}; {hap}")
print(f"- {conns} connections (unless the row says fewer) from bench/idleload.py (core 1) to the server (core 0, fresh process per round); "
      f"first no request (bare), then one request on each ({window} in flight at most), all kept open.")
print(f"- Request: {variant}.")
print("- bytes/conn = (VmRSS at the phase − VmRSS before) ÷ connections; anon = the same for RssAnon. "
      "Before = after a warm-up of 32 exchanges on 32 closed connections.")
print()
print("| target | round | connections | VmRSS before (kB) | bare (kB) | idle (kB) | bare B/conn | idle B/conn | bare anon B/conn | idle anon B/conn | OK exchanges | still open | threads before→idle |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    x = r["result"]; b = x["bytes_per_conn"]; k = x["rss_kb"]; t = x["threads"]
    print(f"| {r['target']} | {r['round']} | {x['conns']:,} | {k['before']:,} | {k['bare']:,} | {k['idle']:,} | {b['bare']:,.0f} | {b['idle']:,.0f} "
          f"| {b['bare_anon']:,.0f} | {b['idle_anon']:,.0f} | {x['ok']:,}/{x['conns']:,} | {x['still_open']:,} | {t['before']}→{t['idle']} |")
targets = []
for r in rows:
    if r["target"] not in targets: targets.append(r["target"])
if len(rows) > len(targets):
    print()
    print("Medians over rounds:")
    print()
    for tname in targets:
        xs = [r["result"]["bytes_per_conn"] for r in rows if r["target"] == tname]
        print(f"- {tname}: bare {statistics.median(x['bare'] for x in xs):,.0f} B/conn, "
              f"idle {statistics.median(x['idle'] for x in xs):,.0f} B/conn")
PY
if [[ $HEAPTRACK -eq 1 ]]; then
    for f in "$TMP"/heapsites-r*.md; do
        [[ -s "$f" ]] || continue
        { echo; echo "## authproxy heap at idle, by allocation site (heaptrack; $(basename "$f" .md))"; echo
          echo "authproxy ran under heaptrack (its RSS above includes heaptrack's overhead) and was killed with every"
          echo "connection idle; heap blocks not freed by then are what the server held."; echo; cat "$f"; } >> "$REPORT"
    done
fi
echo
cat "$REPORT"
mkdir -p "$(dirname "$OUT_FILE")"
cp "$REPORT" "$OUT_FILE"
log "report written to $OUT_FILE"
