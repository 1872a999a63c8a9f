# Shared by the single-proxy scripts (ab.sh, profile.sh, syscalls.sh, threads.sh): a temp dir torn down on exit, an nginx
# origin serving the 2 KB fixture on core 1, and authproxy instances pinned to core 0 with the api-key
# credential issue 10 measures. Source it after `set -euo pipefail`. Listens on 127.0.0.1 only.

TMP="$(mktemp -d)"; chmod 755 "$TMP"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
export PATH="$PATH:/usr/sbin"

# require_tools TOOL... : exits 2 naming the first tool that is missing, with the Debian packages to install.
require_tools() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || { echo "needs $t (apt-get install wrk nginx-light util-linux python3 linux-perf)" >&2; exit 2; }
    done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# bench_origin_host I -> the loopback address of origin host I (0-based) when BENCH_HOSTS > 1: host 0 is 127.0.0.1,
# the others 127.0.1.1, 127.0.1.2, … (250 per /24), all on ORIGIN_PORT: distinct upstream destinations for the
# proxy's pool (issue 39: 1,000 hosts in the pool).
bench_origin_host() {
    local i="$1"
    if ((i == 0)); then echo 127.0.0.1; else echo "127.0.$((1 + (i - 1) / 250)).$((1 + (i - 1) % 250))"; fi
}

# Starts the origin; sets ORIGIN_PORT and URL (the fixture with an ArcGIS-style query), and STATUS_PORT (nginx's
# stub_status: connections accepted). With BENCH_HOSTS=N (default 1) it listens on the N addresses of
# bench_origin_host, on one port.
start_small_origin() {
    ORIGIN_PORT=$(free_port)
    STATUS_PORT=$(free_port)
    mkdir -p "$TMP/www"
    head -c 2023 "$(dirname "${BASH_SOURCE[0]}")/small.json" > "$TMP/www/small.json"
    local listen="" i
    for ((i = 0; i < ${BENCH_HOSTS:-1}; i++)); do listen+="listen $(bench_origin_host "$i"):$ORIGIN_PORT; "; done
    cat > "$TMP/nginx.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile 16384;
daemon off;
pid $TMP/nginx.pid;
error_log $TMP/nginx.err;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 1000000; keepalive_timeout 3600s;
  server { $listen root $TMP/www; }
  server { listen 127.0.0.1:$STATUS_PORT; location / { stub_status; } } }
CONF
    taskset -c 1 nginx -c "$TMP/nginx.conf" & PIDS+=($!)
    URL="http://127.0.0.1:$ORIGIN_PORT/small.json?f=json"
}

# write_bench_proxy_conf DIR PORT -> DIR/proxy.conf (and DIR/state): the proxy listens on PORT and injects
# token=BENCHKEY… into requests to the origin. With BENCH_ADMIN=1 in the environment it also turns on the admin
# listener (`[admin] listen = "127.0.0.1:<free port>"`, which turns on the metrics recorded per request) and
# writes that port to DIR/admin_port; unset or 0 (the default): no [admin] section, as before.
# BENCH_CREDENTIALS=N (default 1) declares N-1 other api-key credentials before the bench one, which the requests
# match: half on other hosts (h<i>.example.com), half on services of the origin's own host
# (/arcgis/rest/services/S<i>), so a lookup that scans pays for all of them (issue 39: 10,000 credentials).
write_bench_proxy_conf() {
    local dir="$1" port="$2"
    mkdir -p "$dir/state"
    rm -f "$dir/admin_port"
    cat > "$dir/proxy.conf" <<CONF
[proxy]
listen = ["127.0.0.1:$port"]
state_dir = "$dir/state"
${BENCH_WORKERS:+workers = $BENCH_WORKERS}
[log]
level = "warning"
$(bench_other_credentials "${BENCH_CREDENTIALS:-1}")
[[credential]]
name = "bench"
type = "api-key"
key = "BENCHKEY0123456789"
match = [$(bench_origin_matches)]
CONF
    if [[ "${BENCH_ADMIN:-0}" == 1 ]]; then
        local admin_port
        admin_port=$(free_port)
        printf '[admin]\nlisten = "127.0.0.1:%s"\n' "$admin_port" >> "$dir/proxy.conf"
        echo "$admin_port" > "$dir/admin_port"
    fi
}

# bench_origin_matches -> the bench credential's match list: every origin host (BENCH_HOSTS, default 1).
bench_origin_matches() {
    local i sep=""
    for ((i = 0; i < ${BENCH_HOSTS:-1}; i++)); do
        printf '%s"http://%s:%s"' "$sep" "$(bench_origin_host "$i")" "$ORIGIN_PORT"
        sep=", "
    done
}

# bench_other_credentials N -> the N-1 credentials write_bench_proxy_conf declares before the bench one.
bench_other_credentials() {
    local n="$1" i
    for ((i = 1; i < n; i++)); do
        if ((i % 2)); then
            printf '[[credential]]\nname = "other%d"\ntype = "api-key"\nkey = "OTHERKEY%d"\nmatch = "https://h%d.example.com/arcgis"\n' "$i" "$i" "$i"
        else
            printf '[[credential]]\nname = "other%d"\ntype = "api-key"\nkey = "OTHERKEY%d"\nmatch = "http://127.0.0.1:%s/arcgis/rest/services/S%d"\n' "$i" "$i" "$ORIGIN_PORT" "$i"
        fi
    done
}

# metrics_requests_total DIR -> the sum of authproxy_requests_total over every label set, scraped from the admin
# listener of the proxy whose conf write_bench_proxy_conf wrote to DIR (BENCH_ADMIN=1).
metrics_requests_total() {
    curl -sf --noproxy '*' --max-time 10 "http://127.0.0.1:$(cat "$1/admin_port")/metrics" \
        | awk '/^authproxy_requests_total[{ ]/ {s += $NF} END {printf "%d\n", s}'
}

# start_bench_proxy BINARY PORT -> prints the pid of the proxy of write_bench_proxy_conf (in $TMP/pPORT), pinned to
# core 0. Honours BENCH_ADMIN like write_bench_proxy_conf. Sends one request through the proxy as a check.
start_bench_proxy() {
    local bin="$1" port="$2" dir="$TMP/p$2"
    write_bench_proxy_conf "$dir" "$port"
    taskset -c 0 "$bin" serve --config "$dir/proxy.conf" > "$dir/log" 2>&1 &
    local pid=$!
    for _ in $(seq 1 100); do curl -s --noproxy '*' -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
    curl -sf -x "http://127.0.0.1:$port" "$URL" -o /dev/null
    echo "$pid"
}

# write_proxy_lua [EXTRA_HEADERS_LUA] -> $TMP/proxy.lua: wrk sends absolute-form requests for $URL to the proxy.
write_proxy_lua() {
    cat > "$TMP/proxy.lua" <<LUA
request = function() return wrk.format("GET", "$URL", {["Host"]="127.0.0.1:$ORIGIN_PORT"${1:-}}) end
LUA
}
