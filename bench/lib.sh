# Shared plumbing of bench/run.sh and bench/https.sh (sourced, not run). The sourcing script sets
# BENCH_TAG (log prefix), REPO_ROOT, TMP and LOG_GLOBS (server logs, relative to TMP, shown when a run fails).

# Core pinning, the same in both scripts: the server under test (authproxy or a peer) gets core 0 to itself;
# the load generator and the origin share core 1.
PIN_SERVER=(taskset -c 0)
PIN_LOAD=(taskset -c 1)
CLK_TCK=$(getconf CLK_TCK)

log() { printf '[%s %s] %s\n' "$BENCH_TAG" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
ver() { "$@" 2>&1 | head -n1 | tr -d '\r' || true; }

# Never let an ambient proxy configuration redirect our loopback traffic.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY

# install_missing PKG... : apt-get install (as root or with sudo) the Debian packages given.
install_missing() {
    [[ $# -gt 0 ]] || return 0
    log "installing missing packages: $*"
    local sudo=()
    if [[ $EUID -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "need root or sudo to install $*"
        sudo=(sudo)
    fi
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "$@"; then
        "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "$@"
    fi
}

# resolve_authproxy: AUTHPROXY_BIN (default .build/release/authproxy, built if absent) as an absolute path.
resolve_authproxy() {
    if [[ -z "$AUTHPROXY_BIN" ]]; then
        AUTHPROXY_BIN="$REPO_ROOT/.build/release/authproxy"
        if [[ ! -x "$AUTHPROXY_BIN" ]]; then
            log "building authproxy (swift build -c release)"
            (cd "$REPO_ROOT" && swift build -c release)
        fi
    fi
    [[ -x "$AUTHPROXY_BIN" ]] || die "authproxy binary not found or not executable: $AUTHPROXY_BIN"
    AUTHPROXY_BIN="$(cd "$(dirname "$AUTHPROXY_BIN")" && pwd)/$(basename "$AUTHPROXY_BIN")"
}

# free_ports N: N free loopback ports on one line.
free_ports() {
    python3 -c '
import socket, sys
ss = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ss.append(s)
print(" ".join(str(s.getsockname()[1]) for s in ss))
for s in ss: s.close()
' "$1"
}

PIDS=()
declare -A PID_OF

start_bg() { # name logfile cmd...
    local name="$1" logf="$2"; shift 2
    "$@" >"$logf" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    PID_OF[$name]=$pid
}

# Stops every server started with start_bg, shows their logs on failure, removes TMP.
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    if [[ $rc -ne 0 && -d "$TMP" ]]; then
        log "failed (rc=$rc); last lines of server logs:"
        local f
        local g
        for g in "${LOG_GLOBS[@]}"; do
            for f in "$TMP"/$g; do
                [[ -s "$f" ]] || continue
                echo "---- $f" >&2
                tail -n 15 "$f" >&2 || true
            done
        done
    fi
    rm -rf "$TMP"
    exit "$rc"
}

# CPU time (utime + stime, in clock ticks) of a server: the process and all its descendants
# (nginx master + worker). /proc/PID/stat already sums all threads of a process.
cpu_ticks() { # pid
    # shellcheck disable=SC2046
    python3 - $(tree_pids "$1") <<'PY'
import sys
total = 0
for pid in sys.argv[1:]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        continue
    fields = s[s.rindex(")") + 2:].split()   # fields[0] is field 3 (state)
    total += int(fields[11]) + int(fields[12])   # fields 14 (utime) and 15 (stime)
print(total)
PY
}

# The process and its descendants (nginx master + workers), one pid per line.
tree_pids() { # pid
    python3 - "$1" <<'PY'
import os, sys
children = {}
for d in os.listdir("/proc"):
    if not d.isdigit(): continue
    try:
        with open(f"/proc/{d}/stat") as f:
            s = f.read()
    except OSError:
        continue
    children.setdefault(int(s[s.rindex(")") + 2:].split()[1]), []).append(int(d))
stack = [int(sys.argv[1])]
while stack:
    p = stack.pop()
    print(p)
    stack.extend(children.get(p, []))
PY
}

# syscalls_per_request CSV REQUESTS [--table]: a `perf stat -x,` file of syscalls:sys_enter_* and
# context-switches, printed per request: all syscalls, then each one with ≥ 0.05 per request, then context
# switches; on one line, or with --table one per line.
syscalls_per_request() { # csv requests [--table]
    python3 - "$1" "${2:-0}" "${3:-}" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) < 3 or not f[0].replace(".", "").isdigit():
        continue
    rows.append((float(f[0]), f[2].replace("syscalls:sys_enter_", "")))
n = int(sys.argv[2] or 0)
if n <= 0:
    print("syscalls: no requests completed")
    sys.exit(0)
total = sum(c for c, e in rows if e != "context-switches")
if sys.argv[3] == "--table":
    print("  %-22s %8.3f" % ("syscalls (all)", total / n))
    for c, e in sorted(rows, reverse=True):
        if c / n >= 0.05:
            print("  %-22s %8.3f" % (e, c / n))
    sys.exit(0)
parts = ["%s %.2f" % (e, c / n) for c, e in sorted(rows, reverse=True) if e != "context-switches" and c / n >= 0.05]
cs = sum(c for c, e in rows if e == "context-switches")
print("syscalls/req %.2f (%s), context switches/req %.2f" % (total / n, ", ".join(parts), cs / n))
PY
}

# cpu_us_per_request TICKS_BEFORE TICKS_AFTER REQUESTS: CPU µs per request, or nan without requests.
cpu_us_per_request() {
    python3 -c "import sys; b, a, r = map(int, sys.argv[1:4]); print('%.1f' % ((a - b) * 1e6 / $CLK_TCK / r) if r else 'nan')" "$1" "$2" "$3"
}

# Peak RSS (VmHWM), summed over each server's process tree (master + workers).
peak_rss_mb() { # pid -> MB
    python3 - "$1" <<'PY'
import os, sys
root = int(sys.argv[1])
children = {}
for d in os.listdir("/proc"):
    if not d.isdigit(): continue
    try:
        with open(f"/proc/{d}/stat") as f:
            s = f.read()
        ppid = int(s[s.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d))
    except (OSError, ValueError):
        pass
total, stack = 0, [root]
while stack:
    p = stack.pop()
    stack.extend(children.get(p, []))
    try:
        with open(f"/proc/{p}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
    except OSError:
        pass
print("%.1f" % (total / 1024) if total else "n/a")
PY
}

# The peers every pinned comparison uses, one thread each: an nginx reverse relay (`worker_processes 1`, upstream
# keep-alive) and an HAProxy reverse relay (`nbthread 1`, `http-reuse always`), both in front of ORIGIN (host:port).
write_nginx_relay_conf() { # dir listen origin [user-line]
    local dir="$1" listen="$2" origin="$3" user_line="${4:-}"
    mkdir -p "$dir"
    cat > "$dir/nginx.conf" <<EOF
$user_line
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    tcp_nodelay on;
    keepalive_requests 100000;
    keepalive_timeout 65s;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    upstream origin {
        server $origin;
        keepalive 64;
        keepalive_requests 100000;
    }
    server {
        listen $listen;
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
}

write_haproxy_relay_cfg() { # file listen origin pidfile
    cat > "$1" <<EOF
global
    maxconn 4096
    pidfile $4
    # one thread, like every other server pinned to core 0
    nbthread 1

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s

frontend fe
    bind $2
    default_backend origin

backend origin
    http-reuse always
    server o1 $3 maxconn 1000
EOF
}
