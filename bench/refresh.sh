#!/usr/bin/env bash
# A token refresh under load (issue 39): C concurrent requests (default 1,000, closed loop, one keep-alive connection
# each) through one `arcgis-token` credential to the faithful ArcGIS test server (Tests/e2e/arcgis/server.py), in
# two windows of equal length: one far from the token's expiry, one centred on the moment the token falls due (it
# enters its refresh margin, a tenth of its lifetime before it expires: the effective expiry under on_demand). bench/refreshload.py drives the load and prints, per window, the requests, errors,
# p50 / p99 / max latency and the token requests the server received (single flight: one per expiry, none in the
# steady window), and the token fetch's own duration (generateToken straight to the server under the same load).
#
#   bash bench/refresh.sh [BINARY] [--ttl SECONDS] [--window SECONDS] [--concurrency C] [--refresh MODE]...
#
# BINARY defaults to .build/release/authproxy. --ttl is the server's token lifetime (default 40; the refresh
# margin is a tenth of it); --window the length of each window (default 8). --refresh ahead|on_demand (repeatable;
# default both, each with a fresh server and proxy): `ahead` refreshes in the background inside the margin, so no
# request should wait; `on_demand` makes the requests that come once the token is due wait for one new token.
# authproxy runs on core 0, the server and the driver on core 1 (taskset); loopback only; torn down on exit.
# Counts (errors, token requests) are exact; latencies are wall clock and move with other load on the machine.
set -euo pipefail
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$BENCH_DIR/.." && pwd)"
BIN="$REPO_ROOT/.build/release/authproxy"; TTL=40; WINDOW=8; CONC=1000; MODES=()
if [[ $# -gt 0 && "$1" != -* ]]; then BIN="$(readlink -f "$1")"; shift; fi
while [[ $# -gt 0 ]]; do
    case "$1" in
        --ttl) TTL="$2"; shift 2 ;;
        --window) WINDOW="$2"; shift 2 ;;
        --concurrency) CONC="$2"; shift 2 ;;
        --refresh) MODES+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ ${#MODES[@]} -gt 0 ]] || MODES=(ahead on_demand)
[[ -x "$BIN" ]] || { echo "authproxy binary not found: $BIN (build it: swift build -c release)" >&2; exit 2; }
[[ "$CONC" =~ ^[0-9]+$ && "$CONC" -ge 1 ]] || { echo "--concurrency takes a positive integer" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
(( $(ulimit -n) > 2 * CONC + 200 )) || { echo "the open-file limit $(ulimit -n) is too low for $CONC connections" >&2; exit 2; }

TMP="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rc=0
for mode in "${MODES[@]}"; do
    [[ "$mode" == ahead || "$mode" == on_demand ]] || { echo "--refresh takes ahead or on_demand" >&2; exit 2; }
    # The server: a thread per connection, so it takes the proxy's upstream connections however many there are.
    taskset -c 1 python3 "$REPO_ROOT/Tests/e2e/arcgis/server.py" --port 0 --print-port --role server --ttl "$TTL" \
        > "$TMP/server-$mode.port" 2> "$TMP/server-$mode.log" &
    SPID=$!; PIDS+=("$SPID")
    for _ in $(seq 1 100); do [[ -s "$TMP/server-$mode.port" ]] && break; sleep 0.1; done
    SPORT=$(head -n1 "$TMP/server-$mode.port")
    [[ "$SPORT" =~ ^[0-9]+$ ]] || { cat "$TMP/server-$mode.log" >&2; echo "the ArcGIS test server did not start" >&2; exit 1; }
    PORT=$(free_port)
    mkdir -p "$TMP/$mode/state"
    cat > "$TMP/$mode/proxy.conf" <<CONF
[proxy]
listen = ["127.0.0.1:$PORT"]
state_dir = "$TMP/$mode/state"
max_connections = $((CONC + 100))
max_connections_per_client = $((CONC + 100))
[log]
level = "warning"
[[credential]]
name = "gis"
type = "arcgis-token"
username = "alice"
password = "alice-pass"
match = "http://127.0.0.1:$SPORT/arcgis"
refresh = "$mode"
CONF
    taskset -c 0 "$BIN" serve --config "$TMP/$mode/proxy.conf" > "$TMP/$mode/log" 2>&1 &
    APID=$!; PIDS+=("$APID")
    for _ in $(seq 1 100); do curl -s --noproxy '*' -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.1; done
    echo "## refresh = \"$mode\" (token lifetime $TTL s, $CONC concurrent requests)"
    echo
    taskset -c 1 python3 "$BENCH_DIR/refreshload.py" --proxy "127.0.0.1:$PORT" --ttl "$TTL" --window "$WINDOW" \
        --concurrency "$CONC" \
        --url "http://127.0.0.1:$SPORT/arcgis/rest/services/Secure/Points/FeatureServer/0/query?where=1%3D1&f=json" \
        || { rc=1; echo; echo "authproxy log (last lines):"; tail -n 20 "$TMP/$mode/log"; }
    echo
    kill "$APID" "$SPID" 2>/dev/null || true
    wait "$APID" "$SPID" 2>/dev/null || true
done
exit "$rc"
