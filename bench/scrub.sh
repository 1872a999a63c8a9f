#!/usr/bin/env bash
# Issue 37: what response scrubbing costs. One authproxy (pinned to core 0) relays, from a local nginx (core 1),
# a 2 KB JSON and a 1 MB WMS capabilities document (GeoServer-like, the key in every backlink) through two `query`
# credentials on the same run: one scrubbing (the default), one with `scrub_responses = false`; and the 1 MB
# document once more gzip-compressed by a server that ignores `Accept-Encoding: identity`, which the proxy
# decodes while it scrubs. Prints CPU µs per response (utime+stime of the proxy from /proc over the run, divided
# by the responses wrk completed) per case, interleaved over the rounds, then the medians; then, for the choice
# between asking for identity and decoding + compressing again, zlib's own cost of gzip-compressing and
# decompressing the 1 MB document (level 6, the usual server default) on the same core.
#
#   bash bench/scrub.sh BINARY [--rounds N] [--duration SECONDS]
#
# Listens on 127.0.0.1 only.
set -euo pipefail

[[ $# -ge 1 ]] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BIN="$(readlink -f "$1")"; shift
ROUNDS=3; DURATION=5
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/pinned.sh"
require_tools wrk nginx taskset python3 curl
KEY="5d3c9e21-8b4f-4a7e-b1c6-0f2e7d9a4b13"

ORIGIN_PORT=$(free_port)
mkdir -p "$TMP/www/scrub" "$TMP/www/plain" "$TMP/www/gz"
for d in scrub plain; do head -c 2023 "$HERE/small.json" > "$TMP/www/$d/small.json"; done
# The 1 MB capabilities document the GeoServer-like test server writes, with the key in every backlink.
PYTHONPATH="$HERE/../Tests/e2e" python3 - "$TMP/www" "$KEY" "$ORIGIN_PORT" <<'PY'
import gzip, sys
from geoserver.server import GeoServer
www, key, port = sys.argv[1:]
g = GeoServer.__new__(GeoServer)
g.big_capabilities = True
doc = g.wms_capabilities("http://127.0.0.1:%s/geoserver" % port, key)
for d in ("scrub", "plain"):
    open("%s/%s/caps.xml" % (www, d), "wb").write(doc)
open("%s/gz/caps.xml" % www, "wb").write(gzip.compress(doc, 6))
print("1 MB document: %d bytes, %d keys, %d bytes gzipped" % (len(doc), doc.count(key.encode()),
                                                            len(gzip.compress(doc, 6))), file=sys.stderr)
PY
cat > "$TMP/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $TMP/nginx.pid;
error_log $TMP/nginx.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  types { application/json json; text/xml xml; }
  server { listen 127.0.0.1:$ORIGIN_PORT; root $TMP/www;
    # A server that compresses whatever the request asked for.
    location /gz/ { add_header Content-Encoding gzip; } } }
CONF
taskset -c 1 nginx -c "$TMP/nginx.conf" & PIDS+=($!)

PORT=$(free_port)
mkdir -p "$TMP/p/state"
cat > "$TMP/p/proxy.conf" <<CONF
[proxy]
listen = ["127.0.0.1:$PORT"]
state_dir = "$TMP/p/state"
[log]
level = "warning"
[[credential]]
name = "scrubbed"
type = "query"
match = ["http://127.0.0.1:$ORIGIN_PORT/scrub/", "http://127.0.0.1:$ORIGIN_PORT/gz/"]
params = { authkey = "$KEY" }
[[credential]]
name = "plain"
type = "query"
match = "http://127.0.0.1:$ORIGIN_PORT/plain/"
params = { authkey = "$KEY" }
scrub_responses = false
CONF
taskset -c 0 "$BIN" serve --config "$TMP/p/proxy.conf" > "$TMP/p/log" 2>&1 &
PID=$!; PIDS+=("$PID")
for _ in $(seq 1 100); do curl -s --noproxy '*' -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.1; done
# Checks: scrubbed responses hold no key (and are whole), the plain ones do, the compressed one arrives decoded.
for path in scrub/caps.xml gz/caps.xml plain/caps.xml; do
    curl -sf -x "http://127.0.0.1:$PORT" "http://127.0.0.1:$ORIGIN_PORT/$path" -o "$TMP/check.xml"
    [[ $(stat -c %s "$TMP/check.xml") == $(stat -c %s "$TMP/www/scrub/caps.xml") ]] || { echo "/$path arrived cut" >&2; exit 1; }
    n=$(grep -c "$KEY" "$TMP/check.xml" || true)
    if [[ "$path" == plain/* ]]; then
        [[ "$n" != 0 ]] || { echo "scrub_responses = false scrubbed /$path" >&2; exit 1; }
    else
        [[ "$n" == 0 ]] || { echo "the key reached the client through /$path" >&2; exit 1; }
    fi
done

TICK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
run() {  # path conns -> "cpu_us_per_response responses"
    local path="$1" c="$2" t0 t1 out reqs
    cat > "$TMP/proxy.lua" <<LUA
request = function() return wrk.format("GET", "http://127.0.0.1:$ORIGIN_PORT/$path", {["Host"]="127.0.0.1:$ORIGIN_PORT"}) end
LUA
    t0=$(cpu_ticks "$PID")
    out=$(taskset -c 1 wrk -t1 -c"$c" -d"${DURATION}s" -s "$TMP/proxy.lua" "http://127.0.0.1:$PORT" 2>&1)
    t1=$(cpu_ticks "$PID")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    python3 -c "import sys; r=int(sys.argv[1]); print('%.1f %d' % ((int(sys.argv[3])-int(sys.argv[2]))/int(sys.argv[4])*1e6/max(r,1), r))" \
        "$reqs" "$t0" "$t1" "$TICK"
}

CASES=("plain/small.json" "scrub/small.json" "plain/caps.xml" "scrub/caps.xml" "gz/caps.xml")
declare -A RESULTS
for ((r = 1; r <= ROUNDS; r++)); do
    for path in "${CASES[@]}"; do
        conns=10; [[ "$path" == *caps* ]] && conns=4
        read -r us n < <(run "$path" "$conns")
        RESULTS[$path]+="$us "
        printf 'round %d  %-18s %8s µs/response  (%d responses)\n' "$r" "$path" "$us" "$n"
    done
done
echo "medians (CPU µs per response):"
for path in "${CASES[@]}"; do
    python3 -c "import statistics, sys; print('  %-18s %8.1f' % (sys.argv[1], statistics.median(map(float, sys.argv[2].split()))))" \
        "$path" "${RESULTS[$path]}"
done
echo "zlib on core 0, the 1 MB document (level 6), µs per call:"
taskset -c 0 python3 - "$TMP/www/scrub/caps.xml" <<'PY'
import sys, timeit, zlib
doc = open(sys.argv[1], "rb").read()
packed = zlib.compress(doc, 6)
n = 20
print("  compress   %8.1f" % (timeit.timeit(lambda: zlib.compress(doc, 6), number=n) / n * 1e6))
print("  decompress %8.1f" % (timeit.timeit(lambda: zlib.decompress(packed), number=n) / n * 1e6))
PY
